import { configDefaults, defineConfig } from 'vitest/config';

// Suites that test the package itself, not the database behind it: the tarball installed into
// fresh projects, the published declarations, the docs' examples type-checked. They run in the
// embedded pass; under DATABASE_URL (a second pass against your own server, as .ci/run does)
// they would only repeat it, so they are left out unless LEASEHOLD_ALL_SUITES=1.
const PACKAGE_ONLY = ['test/package/package.test.ts', 'test/package/public-types.test.ts', 'test/integrations/integrations-docs.test.ts'];
const secondPass = !!process.env.DATABASE_URL && process.env.LEASEHOLD_ALL_SUITES !== '1';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: [...configDefaults.exclude, ...(secondPass ? PACKAGE_ONLY : [])],
    globalSetup: ['test/support/global-setup.ts'],
    // Real processes and real timeouts: generous limits, and no more parallel files than
    // this 2-core class of machine can run without starving the timing-sensitive tests.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
