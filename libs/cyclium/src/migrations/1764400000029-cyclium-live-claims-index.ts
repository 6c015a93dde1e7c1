import type { MigrationInterface, QueryRunner } from 'typeorm';
import { buildIndexes, dropIndexes } from './concurrent-indexes.js';

/**
 * Lighter writes per claim: the index of every claim by (state, lease_until), which each renewal
 * and each finish wrote a new entry in, becomes one over the held claims by owner. What reads
 * claims by state asks only for held ones (the expired-lease sweep, the cluster status's count per
 * node), and those are as many as the work in flight, however many finished claims the table
 * keeps. A renewal changes no indexed column, so with room left on the page (fillfactor 80) it is
 * a HOT update that writes no index entry; a finish leaves the index instead of entering it again.
 *
 * Only an index and a storage parameter change (neither stops writes), so a node of the previous
 * release works beside this one unchanged; the new index is built before the old one goes.
 */
export class CycliumLiveClaimsIndex1764400000029 implements MigrationInterface {
  name = 'CycliumLiveClaimsIndex1764400000029';

  async up(runner: QueryRunner): Promise<void> {
    // Applies to pages written from now on; a full page's row is updated cold until pruned.
    await runner.query(`ALTER TABLE cyclium_work_claims SET (fillfactor = 80)`);
    await buildIndexes(runner, ['cyclium_work_claims'], [LIVE]);
    await dropIndexes(runner, ['cyclium_work_claims'], [OLD[0]]);
  }

  async down(runner: QueryRunner): Promise<void> {
    await buildIndexes(runner, ['cyclium_work_claims'], [OLD]);
    await dropIndexes(runner, ['cyclium_work_claims'], [LIVE[0]]);
    await runner.query(`ALTER TABLE cyclium_work_claims RESET (fillfactor)`);
  }
}

const LIVE: readonly [string, string] = [
  'cyclium_work_claims_live',
  `cyclium_work_claims (owner_node) WHERE state = 'claimed'`,
];

const OLD: readonly [string, string] = [
  'cyclium_work_claims_state_lease',
  `cyclium_work_claims (state, lease_until)`,
];
