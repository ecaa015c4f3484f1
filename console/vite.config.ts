// The web console's front end: Preact views and uPlot charts, bundled into dist/console (served by the gateway
// under /console/, nothing from a CDN). `npm run build` runs this after tsc.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: '../dist/console',
    emptyOutDir: true,
    // The gateway serves these with long caching: names carry a content hash.
    assetsDir: 'assets',
    chunkSizeWarningLimit: 200,
  },
});
