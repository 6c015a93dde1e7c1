export { FakeClaims, type FakeClaimsOptions } from '../claims/fake-claims.js';
export {
  startPostgres,
  freePort,
  type RunningPostgres,
  type StartPostgresOptions,
} from './embedded-postgres.js';
export { migrateDatabase } from './migrate-database.js';
