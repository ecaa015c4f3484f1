import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // test/package installs the release into this machine with dpkg, as root: it runs where EDGEFERRY_RELEASE
    // names the folder `npm run package` wrote (.ci/run builds it once and sets it), and nowhere else.
    exclude:
      process.env.EDGEFERRY_RELEASE === undefined
        ? [...configDefaults.exclude, 'test/package/**']
        : configDefaults.exclude,
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration tests start real processes; two cores, so keep parallelism modest.
    maxWorkers: 2,
  },
});
