// Native-ESM Jest (every @nestjs/* 12 package is ESM only): run with --experimental-vm-modules.
const shared = {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.jest.json' }] },
  moduleNameMapper: {
    '^@cyclium/nestjs$': '<rootDir>/libs/cyclium/src/index.ts',
    '^@cyclium/nestjs/(.*)$': '<rootDir>/libs/cyclium/src/$1/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
};

/** @type {import('jest').Config} */
export default {
  // Real processes and a real database: each wait has its own deadline (waitFor); this is the backstop.
  testTimeout: 60_000,
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
  projects: [
    { ...shared, displayName: 'unit', testMatch: ['<rootDir>/libs/**/src/**/*.spec.ts', '<rootDir>/apps/**/src/**/*.spec.ts'] },
    {
      ...shared,
      displayName: 'integration',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      // Fails a test on any unhandled rejection or uncaught exception here, or a crashed node process.
      setupFilesAfterEnv: ['<rootDir>/test/support/fault-guard.ts'],
    },
  ],
};
