import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  episodeRow,
  journal,
  rebalanceOn,
  startNode,
  stepsJournaled,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

describe('zombie: a holder paused past its lease wakes up after a peer took over', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(['node-a', 'node-b'].map((id) => startNode(database.url, id)))),
    );
  });

  afterAll(async () => {
    for (const node of nodes) node.process.kill('SIGCONT');
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('writes no finding, output, journal step or status after waking', async () => {
    const [holder] = nodes;
    const id = await rebalanceOn(holder, {
      resource: 'shard-z',
      stepMs: 1200,
      outputKey: 'zombie-report',
    });
    await waitFor(
      'the first checkpoint',
      async () => (await stepsJournaled(database.db, id)).length >= 1,
    );
    holder.process.kill('SIGSTOP');

    const done = await waitForStatus(database.db, id, 'done', 45_000);
    expect(done.owner_node).toBe('node-b');
    const snapshot = async () => ({
      episode: await episodeRow(database.db, id),
      journal: await journal(database.db, id),
      outputs: (
        await database.db.query(
          `SELECT id, status, dedupe_key FROM cyclium_outputs WHERE episode_id = $1 OR dedupe_key = 'zombie-report'`,
          [id],
        )
      ).rows,
      findings: (await database.db.query(`SELECT id, status FROM cyclium_findings ORDER BY id`))
        .rows,
      claim: (
        await database.db.query(
          `SELECT owner_node, fence, state FROM cyclium_work_claims WHERE dedupe_key = $1`,
          [`episode:${id}`],
        )
      ).rows,
    });
    const before = await snapshot();
    expect(before.outputs).toHaveLength(1);

    holder.process.kill('SIGCONT');
    // The zombie notices on waking (its renewal misses, its deadline has passed) and says so.
    const aborted = new RegExp(`episode ${id} \\([^)]*\\) aborted`);
    await waitFor('the woken holder to abort', () => aborted.test(holder.output()), 20_000);
    expect(await snapshot()).toEqual(before);
  }, 120_000);
});
