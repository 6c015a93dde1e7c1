export { FakeClaims, type FakeClaimsOptions } from '../claims/fake-claims.js';
export {
  startPostgres,
  freePort,
  type RunningPostgres,
  type StartPostgresOptions,
} from './embedded-postgres.js';
export { migrateDatabase } from './migrate-database.js';
export {
  createCycliumTestApp,
  type CycliumTestApp,
  type CycliumTestAppOptions,
} from './cyclium-test-app.js';
export { TestClock } from './test-clock.js';
export type { CycliumClock } from '../primitives/clock.js';
export type { JournalEntry, WaitForOptions } from './test-driver.js';
