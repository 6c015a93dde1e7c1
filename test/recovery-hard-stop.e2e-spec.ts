import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  journal,
  rebalanceOn,
  sideEffects,
  startNode,
  stepsJournaled,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

describe('hard stop: kill -9 a node mid-episode', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  beforeAll(async () => {
    nodes.push(
      ...(await Promise.all(
        ['node-a', 'node-b', 'node-c'].map((id) => startNode(database.url, id)),
      )),
    );
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('restart policy: a peer restarts it from its checkpoints and completes it; attempts is 1', async () => {
    const victim = nodes[0];
    const id = await rebalanceOn(victim, { resource: 'shard-7', stepMs: 600 });
    await waitFor(
      'two checkpointed steps',
      async () => (await stepsJournaled(database.db, id)).length >= 2,
    );
    await victim.stop('SIGKILL');
    const checkpointed = await stepsJournaled(database.db, id);

    const row = await waitForStatus(database.db, id, 'done');
    expect(row).toMatchObject({ attempts: 1, error_class: null });
    expect(['node-b', 'node-c']).toContain(row.owner_node);
    expect(row.summary).toMatch(/^rebalanced shard-7 on node-[bc]$/);

    const effects = await sideEffects(database.db, id);
    for (const step of checkpointed)
      expect({ step, runs: effects[step] }).toEqual({ step, runs: 1 });
    expect(Object.keys(effects).sort()).toEqual(['drain', 'move', 'plan', 'report', 'verify']);
    const names = (await journal(database.db, id)).map((j) => `${j.kind}:${j.name}`);
    expect(names).toContain('observation:resumed');
    expect(names.filter((n) => n.startsWith('step:'))).toEqual([
      'step:plan',
      'step:drain',
      'step:move',
      'step:verify',
      'step:report',
    ]);
  });

  it('fail policy: the orphan is failed with error_class orphaned', async () => {
    const victim = nodes[1];
    const id = await rebalanceOn(victim, { resource: 'shard-9', stepMs: 600 }, 'rebalance_once');
    await waitFor(
      'a checkpointed step',
      async () => (await stepsJournaled(database.db, id)).length >= 1,
    );
    await victim.stop('SIGKILL');

    const row = await waitForStatus(database.db, id, 'failed');
    expect(row).toMatchObject({ error_class: 'orphaned', attempts: 1 });
    expect((await journal(database.db, id)).map((j) => j.name)).toContain('orphaned');
    // Nobody ran the rest of it.
    expect((await sideEffects(database.db, id)).report).toBeUndefined();
  });
});
