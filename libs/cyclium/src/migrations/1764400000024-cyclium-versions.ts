import type { MigrationInterface, QueryRunner } from 'typeorm';
import { ADMIT } from './1764400000023-cyclium-flow-control.js';

const ADMIT_9 = `cyclium_flow_admit(text, text, text, text, int, int, int, int, double precision)`;

/**
 * The admission of migration 23 with one more parameter, `p_versions`: the versions the calling
 * node's code runs. A throttled row pinned to another version is passed over, so it stays
 * throttled for a node that runs it rather than being started where its run would only be handed
 * back.
 */
export function admitWithVersions(): string {
  const withParameter = ADMIT.replace(
    'p_period_ms double precision)',
    'p_period_ms double precision, p_versions text[])',
  );
  const withFilter = withParameter.replace(
    "WHERE e.status = 'throttled' AND e.flow_key = l.k AND",
    "WHERE e.status = 'throttled' AND e.flow_key = l.k\n" +
      '                    AND (e.version IS NULL OR e.version = ANY(p_versions)) AND',
  );
  if (withParameter === ADMIT || withFilter === withParameter)
    throw new Error('CycliumVersions1764400000024: the admission of migration 23 changed shape');
  return withFilter;
}

/**
 * The version of its expectation an episode started on (`@Expectation({ version })`), so only a
 * node hosting that version, or one that accepts it, resumes it. NULL: never started, or started on
 * code without a version (any node hosting the expectation runs it). Adding a nullable column
 * without a default rewrites nothing, and nothing indexes it: the statements that filter on it read
 * the rows they already select by other indexes. The flow admission gains the versions of its
 * caller (the version-less form is dropped: only nodes of this release call it).
 */
export class CycliumVersions1764400000024 implements MigrationInterface {
  name = 'CycliumVersions1764400000024';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_episodes ADD COLUMN version text`);
    await runner.query(admitWithVersions());
    await runner.query(`DROP FUNCTION ${ADMIT_9}`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(ADMIT);
    await runner.query(
      `DROP FUNCTION cyclium_flow_admit(text, text, text, text, int, int, int, int, ` +
        `double precision, text[])`,
    );
    await runner.query(`ALTER TABLE cyclium_episodes DROP COLUMN version`);
  }
}
