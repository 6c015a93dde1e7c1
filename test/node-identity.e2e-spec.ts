import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';

interface NodeInfo {
  identity: string;
  pid: number;
}

describe('node identity across real processes', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  const registered = async () =>
    (
      await database.db.query<{ node_identity: string; pid: number }>(
        `SELECT node_identity, pid FROM cyclium_nodes`,
      )
    ).rows;

  it('mints one identity per process: stable while it lives, distinct per process, new after a restart', async () => {
    const [a, b] = await Promise.all([
      startDemoNode(database.url, { CYCLIUM_NODE_ID: undefined }),
      startDemoNode(database.url, { CYCLIUM_NODE_ID: undefined }),
    ]);
    nodes.push(a, b);

    const a1 = await a.get<NodeInfo>('/node');
    const b1 = await b.get<NodeInfo>('/node');
    expect(a1.pid).toBe(a.process.pid);
    expect(b1.pid).toBe(b.process.pid);
    expect(a1.identity).toContain(`-${a1.pid}-`);
    expect(a1.identity).not.toBe(b1.identity);
    expect((await a.get<NodeInfo>('/node')).identity).toBe(a1.identity);
    expect((await b.get<NodeInfo>('/node')).identity).toBe(b1.identity);

    expect(await registered()).toEqual(
      expect.arrayContaining([
        { node_identity: a1.identity, pid: a1.pid },
        { node_identity: b1.identity, pid: b1.pid },
      ]),
    );

    await a.stop();
    const restarted = await startDemoNode(database.url, { CYCLIUM_NODE_ID: undefined });
    nodes.push(restarted);
    const a2 = await restarted.get<NodeInfo>('/node');
    expect(a2.identity).not.toBe(a1.identity);
    expect((await registered()).map((r) => r.node_identity)).toContain(a2.identity);
  });

  it('uses CYCLIUM_NODE_ID when set, so two processes on one host can be told apart by name', async () => {
    const [x, y] = await Promise.all([
      startDemoNode(database.url, { CYCLIUM_NODE_ID: 'node-x' }),
      startDemoNode(database.url, { CYCLIUM_NODE_ID: 'node-y' }),
    ]);
    nodes.push(x, y);
    expect((await x.get<NodeInfo>('/node')).identity).toBe('node-x');
    expect((await y.get<NodeInfo>('/node')).identity).toBe('node-y');
    const rows = await registered();
    expect(rows).toContainEqual({ node_identity: 'node-x', pid: x.process.pid });
    expect(rows).toContainEqual({ node_identity: 'node-y', pid: y.process.pid });
  });
});
