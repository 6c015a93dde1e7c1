// Native-ESM Jest (every @nestjs/* 12 package is ESM only): run with --experimental-vm-modules.
const shared = {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: '<rootDir>/tsconfig.jest.json' }],
  },
  moduleNameMapper: {
    '^@cyclium/nestjs$': '<rootDir>/libs/cyclium/src/index.ts',
    '^@cyclium/nestjs/(.*)$': '<rootDir>/libs/cyclium/src/$1/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
};

/**
 * Files that measure how much work a node gets through in a bounded time (5,000 orphans in three
 * sweeps, 200 events posted at once), which a second file running beside them on two cores can
 * starve: `npm test` runs them after the others, one at a time (`--selectProjects serial`).
 * Every other file has a database of its own (test/support/database.ts) and ports from the OS.
 */
const SERIAL = ['/test/orphan-burst.e2e-spec.ts', '/test/trigger-only.e2e-spec.ts'];

/**
 * The inner loop (`npm run test:quick`, under two minutes): with the unit specs, the integration
 * files that run in this process (no node processes, no server of their own) and take a few
 * seconds. They run in `npm test` too, with the rest.
 */
const QUICK = [
  '/test/schema-guarantees.e2e-spec.ts',
  '/test/scope-predicates.e2e-spec.ts',
  '/test/end-writes.e2e-spec.ts',
  '/test/episodes-list.e2e-spec.ts',
  '/test/migrations.e2e-spec.ts',
  '/test/demo-http-logs.e2e-spec.ts',
  '/test/actor-scopes.e2e-spec.ts',
  '/test/step-results.e2e-spec.ts',
  '/test/forged-cancel.e2e-spec.ts',
  '/test/step-writes.e2e-spec.ts',
  '/test/recovery-placement.e2e-spec.ts',
  '/test/operator-logs.e2e-spec.ts',
  '/test/lost-owner-writes.e2e-spec.ts',
  '/test/recovery-sweep.e2e-spec.ts',
  '/test/episode-begin.e2e-spec.ts',
  '/test/queue-busy-claim.e2e-spec.ts',
  '/test/cancel.e2e-spec.ts',
  '/test/begin-writes.e2e-spec.ts',
  '/test/expectation-delay.e2e-spec.ts',
  '/test/bus-hostile-rows.e2e-spec.ts',
  '/test/retention.e2e-spec.ts',
  '/test/actor-discovery.e2e-spec.ts',
  '/test/connection-loss.e2e-spec.ts',
  '/test/work-claims.e2e-spec.ts',
  '/test/bus-wake-ups.e2e-spec.ts',
  '/test/work-claims-gate.e2e-spec.ts',
  '/test/output-outbox.e2e-spec.ts',
  '/test/integrity-workflow.e2e-spec.ts',
  '/test/node-mode.e2e-spec.ts',
  '/test/postgres-bus.e2e-spec.ts',
  '/test/host-transactions.e2e-spec.ts',
  '/test/waits.e2e-spec.ts',
  '/test/node-engines.e2e-spec.ts',
  '/test/trace-propagation.e2e-spec.ts',
  '/test/testing-kit.e2e-spec.ts',
  '/test/demo-actors-kit.e2e-spec.ts',
  '/test/types/folder-imports.e2e-spec.ts',
  '/test/types/root-exports.e2e-spec.ts',
  '/test/wait-while-running.e2e-spec.ts',
];

/** @type {import('jest').Config} */
export default {
  // Real processes and a real database: each wait has its own deadline (waitFor); this is the backstop.
  testTimeout: 60_000,
  globalSetup: '<rootDir>/test/support/global-setup.mjs',
  globalTeardown: '<rootDir>/test/support/global-teardown.mjs',
  projects: [
    {
      ...shared,
      displayName: 'unit',
      testMatch: ['<rootDir>/libs/**/src/**/*.spec.ts', '<rootDir>/apps/**/src/**/*.spec.ts'],
    },
    {
      ...shared,
      displayName: 'integration',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      testPathIgnorePatterns: ['/node_modules/', ...SERIAL],
      // Fails a test on any unhandled rejection or uncaught exception here, or a crashed node process.
      setupFilesAfterEnv: ['<rootDir>/test/support/fault-guard.ts'],
    },
    {
      ...shared,
      displayName: 'quick',
      testMatch: QUICK.map((file) => `<rootDir>${file}`),
      setupFilesAfterEnv: ['<rootDir>/test/support/fault-guard.ts'],
    },
    {
      ...shared,
      displayName: 'serial',
      testMatch: SERIAL.map((file) => `<rootDir>${file}`),
      setupFilesAfterEnv: ['<rootDir>/test/support/fault-guard.ts'],
    },
  ],
};
