import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A `signature` column on each table whose rows decide what runs next, for the `integrity` option
 * (an HMAC over the row's meaningful fields, `<keyId>:<base64url>`). NULL without the option, and
 * on rows of nodes that do not sign: such a row fails verification only where the option is on.
 * Adding a nullable column without a default rewrites no table.
 */
export class CycliumRowSignatures1764400000011 implements MigrationInterface {
  name = 'CycliumRowSignatures1764400000011';

  async up(runner: QueryRunner): Promise<void> {
    for (const table of TABLES)
      await runner.query(`ALTER TABLE ${table} ADD COLUMN signature text`);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const table of TABLES) await runner.query(`ALTER TABLE ${table} DROP COLUMN signature`);
  }
}

const TABLES = [
  'cyclium_episode_checkpoints',
  'cyclium_trigger_requests',
  'cyclium_workflow_instances',
  'cyclium_events',
  'cyclium_nodes',
];
