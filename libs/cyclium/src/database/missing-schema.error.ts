/** A Cyclium table is missing: the host has not run `cycliumMigrations` against this database. */
export class MissingSchemaError extends Error {
  override readonly name = 'MissingSchemaError';

  constructor(readonly table: string) {
    super(
      `${table} does not exist: add cycliumMigrations (from @cyclium/nestjs/migrations) to your DataSource's migrations and run them`,
    );
  }
}
