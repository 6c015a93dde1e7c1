import { DataSource } from 'typeorm';
import { cycliumMigrations } from '../migrations/index.js';

/** Applies `cycliumMigrations` to the database at `url` (idempotent: applied ones are skipped). */
export async function migrateDatabase(url: string): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: cycliumMigrations,
    logging: false,
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await dataSource.destroy();
  }
}
