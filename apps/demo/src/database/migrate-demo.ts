import { DataSource } from 'typeorm';
import { demoMigrations } from './demo-migrations.js';

/**
 * Applies `demoMigrations` to the database at `url` (idempotent). Run it after Cyclium's
 * migrations; the cluster tests call it too, on each database they clone.
 */
export async function migrateDemoDatabase(url: string): Promise<void> {
  // A table of its own, so the demo's history never mixes with the library's `migrations` table.
  const dataSource = new DataSource({
    type: 'postgres',
    url,
    migrations: demoMigrations,
    migrationsTableName: 'demo_migrations',
    logging: false,
  });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await dataSource.destroy();
  }
}
