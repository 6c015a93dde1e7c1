import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes } from './concurrent-indexes.js';

/**
 * What the status API and the operations page read, at a cost that follows the recent work and not
 * the history:
 * - finished episodes by `finished_at`, with status and actor in the index, so "terminal in the
 *   last N minutes" is an index-only range scan however many episodes finished before;
 * - event-caused episodes by their event id, so an operator holding the id `POST /events` answered
 *   finds the episodes it caused (partial: other triggers pay nothing);
 * - one episode's outputs, for its page (and for the cascade when an episode row is deleted);
 * - each node's last recovery sweep, written after every sweep.
 *
 * The indexes must not stop writes on a live table for the length of a build: see buildIndexes.
 */
export class CycliumOperatorReads1764400000012 implements MigrationInterface {
  name = 'CycliumOperatorReads1764400000012';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`ALTER TABLE cyclium_nodes ADD COLUMN IF NOT EXISTS last_sweep jsonb`);
    await buildIndexes(runner, ['cyclium_episodes'], INDEXES);
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
    await runner.query(`ALTER TABLE cyclium_nodes DROP COLUMN IF EXISTS last_sweep`);
  }
}

const INDEXES: ReadonlyArray<[string, string]> = [
  [
    'cyclium_episodes_finished',
    `cyclium_episodes (finished_at) INCLUDE (status, actor_id) WHERE finished_at IS NOT NULL`,
  ],
  [
    'cyclium_episodes_event_id',
    `cyclium_episodes ((trigger_ref ->> 'eventId')) WHERE trigger_type = 'event'`,
  ],
  ['cyclium_outputs_episode', `cyclium_outputs (episode_id)`],
];
