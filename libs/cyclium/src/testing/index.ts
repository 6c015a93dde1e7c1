export { startPostgres, freePort, type RunningPostgres, type StartPostgresOptions } from './embedded-postgres.js';
export { migrateDatabase } from './migrate-database.js';
