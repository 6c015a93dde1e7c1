import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes } from './concurrent-indexes.js';

/**
 * What retention reads, what deleting an episode touches and what the episode list pages through,
 * at a cost that follows the work due (or the page asked for) and not the history:
 * - finished episodes not yet archived, and archived ones, by env and age: each pass reads the
 *   oldest due rows of its env, and rows it has archived leave the first index;
 * - the rows that point at an episode or a workflow instance (trigger requests, findings, a
 *   workflow's episodes): without an index each deleted row would cost a scan of their table to
 *   cascade or set NULL;
 * - finished workflow instances by env and age;
 * - episodes newest first (Episodes.list's keyset order), for all of them and for one actor in one
 *   status: without them a page is a sort of every episode, and a rare actor and status, walked in
 *   time order, reads far into the history to fill one page.
 *
 * Built without stopping writes on a live table: see buildIndexes.
 */
export class CycliumRetention1764400000013 implements MigrationInterface {
  name = 'CycliumRetention1764400000013';

  async up(runner: QueryRunner): Promise<void> {
    await buildIndexes(
      runner,
      [
        'cyclium_episodes',
        'cyclium_trigger_requests',
        'cyclium_findings',
        'cyclium_workflow_instances',
      ],
      INDEXES,
    );
  }

  async down(runner: QueryRunner): Promise<void> {
    for (const [name] of INDEXES) await runner.query(`DROP INDEX IF EXISTS ${name}`);
  }
}

const INDEXES: ReadonlyArray<[string, string]> = [
  [
    'cyclium_episodes_unarchived',
    `cyclium_episodes (source_env, finished_at) WHERE finished_at IS NOT NULL AND archived_at IS ` +
      `NULL`,
  ],
  [
    'cyclium_episodes_archived',
    `cyclium_episodes (source_env, archived_at) WHERE archived_at IS NOT NULL`,
  ],
  [
    'cyclium_episodes_workflow_instance',
    `cyclium_episodes (workflow_instance_id) WHERE workflow_instance_id IS NOT NULL`,
  ],
  ['cyclium_trigger_requests_episode', `cyclium_trigger_requests (episode_id)`],
  [
    'cyclium_findings_raised_by',
    `cyclium_findings (raised_by_episode_id) WHERE raised_by_episode_id IS NOT NULL`,
  ],
  [
    'cyclium_findings_cleared_by',
    `cyclium_findings (cleared_by_episode_id) WHERE cleared_by_episode_id IS NOT NULL`,
  ],
  ['cyclium_episodes_inserted', `cyclium_episodes (inserted_at, id)`],
  [
    'cyclium_episodes_actor_status_inserted',
    `cyclium_episodes (actor_id, status, inserted_at, id)`,
  ],
  [
    'cyclium_workflow_instances_finished',
    `cyclium_workflow_instances (source_env, finished_at) WHERE finished_at IS NOT NULL`,
  ],
];
