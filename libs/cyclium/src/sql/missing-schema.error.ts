/** The database lacks a Cyclium migration: the host has not run `cycliumMigrations` against it. */
export class MissingSchemaError extends Error {
  override readonly name = 'MissingSchemaError';

  constructor(
    /** The first migration still to run, for example `CycliumSchema1764400000000`. */
    readonly migration: string,
    /** What its absence looks like in the database. */
    readonly missing: string,
  ) {
    super(
      `Cyclium migration ${migration} has not run on this database (${missing} does not exist). ` +
        `Add cycliumMigrations (from @cyclium/nestjs/migrations) to your DataSource's ` +
        `migrations, then either set ` +
        `migrationsRun: true in TypeOrmModule.forRoot(...) so they run at boot, or run them ` +
        `before deploying with ` +
        `npx typeorm migration:run -d <your data source file>`,
    );
  }
}
