// The DataSource `npm run migration:run` hands to the TypeORM CLI: Cyclium's migrations, applied
// to DATABASE_URL. A host app adds `cycliumMigrations` to its own DataSource instead.
import { cycliumMigrations } from '@cyclium/nestjs/migrations';
import { DataSource } from 'typeorm';

if (!process.env.DATABASE_URL) throw new Error('DATABASE_URL is not set');

export default new DataSource({
  type: 'postgres',
  url: process.env.DATABASE_URL,
  migrations: cycliumMigrations,
});
