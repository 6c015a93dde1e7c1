import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes, dropIndexes } from './concurrent-indexes.js';

/**
 * Lighter writes per episode: the two indexes of every episode by status and stack, and by status
 * and env (migration 0), become one over the rows that are not `done`, with both scope columns.
 * What reads an episode by status asks for the live work (running, queued, waiting, throttled…)
 * or for failures and cancels, which this index still holds; the many `done` rows are listed
 * through the list indexes (inserted_at, actor) as before. A 1-step episode that ends `done` now
 * writes one entry here at its begin and none at its end, instead of two and two.
 *
 * Only indexes change, so a node of the previous release works beside this one unchanged; the
 * new index is built before the old ones go, each without stopping writes (see buildIndexes).
 */
export class CycliumUnfinishedIndex1764400000028 implements MigrationInterface {
  name = 'CycliumUnfinishedIndex1764400000028';

  async up(runner: QueryRunner): Promise<void> {
    await buildIndexes(runner, ['cyclium_episodes'], [UNFINISHED]);
    await dropIndexes(
      runner,
      ['cyclium_episodes'],
      OLD.map(([name]) => name),
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    await buildIndexes(runner, ['cyclium_episodes'], OLD);
    await dropIndexes(runner, ['cyclium_episodes'], [UNFINISHED[0]]);
  }
}

const UNFINISHED: readonly [string, string] = [
  'cyclium_episodes_unfinished',
  `cyclium_episodes (status, source_env, source_stack) WHERE status <> 'done'`,
];

const OLD: ReadonlyArray<readonly [string, string]> = [
  ['cyclium_episodes_status_stack', `cyclium_episodes (status, source_stack)`],
  ['cyclium_episodes_status_env', `cyclium_episodes (status, source_env)`],
];
