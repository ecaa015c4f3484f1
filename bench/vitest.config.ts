import { defineConfig } from 'vitest/config';

/** Benchmarks written as vitest files (`npm run bench:opcua`); `npm test` does not run them. */
export default defineConfig({
  test: {
    include: ['bench/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 60_000,
  },
});
