import { afterAll, describe, expect, it } from '@jest/globals';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  bootStandby,
  startMatrixProcess,
  triggerOn,
  type MatrixNode,
} from './support/matrix-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * Two live processes under one node identity. Each process (test/fixtures/matrix-node.ts) loads
 * first; its node boots on demand, so the test controls when each boot looks at the row. Steps are
 * stubborn (they sleep through the drain's abort) so a SIGTERM-ed node stays `going` for a while.
 */
const TIMINGS = {
  staleAfterMs: 60_000,
  leaseSeconds: 10,
  settleMs: 60_000,
  intervalMs: 60_000,
  stepMs: 20_000,
  beatMs: 500,
};
const twin = (standby?: string): MatrixNode => ({
  env: 'twins',
  claims: 'off',
  nodeId: 'twin',
  ...(standby ? { standby } : {}),
});

describe('two live processes with the same node identity', () => {
  const database = useDatabase();
  const processes: DemoNode[] = [];

  afterAll(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGKILL')));
  });

  const row = async () =>
    (
      await database.db.query<{ boot_id: string | null; started_at: Date }>(
        `SELECT boot_id, started_at FROM cyclium_nodes WHERE node_identity = 'twin'`,
      )
    ).rows[0];

  it('refuses the second at boot, naming the identity; warns instead while the first is going, and leaves it the row', async () => {
    const extra = { MATRIX_STUBBORN: '1', MATRIX_SHUTDOWN_MS: '3000' };
    // The second process tries twice: a node that is refused, then one that boots while the first is going.
    const [first, second] = await Promise.all([
      startMatrixProcess(database.url, [twin()], TIMINGS, extra),
      startMatrixProcess(database.url, [twin('late'), twin('later')], TIMINGS, extra),
    ]);
    processes.push(first, second);
    const firstBoot = (await row())?.boot_id;
    expect(firstBoot).toMatch(/^[0-9a-f-]{36}$/);

    // The first one beats on: the second sees the beat advance and refuses to boot.
    await expect(bootStandby(second, 'late', ['twins'])).rejects.toThrow(
      `DuplicateNodeIdentityError: node identity "twin" is already in use by another live process (boot id ${firstBoot})`,
    );
    expect((await row())?.boot_id).toBe(firstBoot);
    // It said what it waited for while it watched the beat (no silent seconds at boot).
    expect(second.output()).toMatch(
      new RegExp(
        `node identity "twin" beat \\d+ ms ago from another process \\(boot id ${firstBoot}\\): ` +
          `waiting up to \\d+ ms to see whether it stopped`,
      ),
    );

    // Going: a SIGTERM clears its boot id first, then the drain waits for the stubborn step.
    await triggerOn(first, 'twins', 'restart');
    first.process.kill('SIGTERM');
    await waitFor(
      'the first to clear its boot id',
      async () => (await row())?.boot_id === null,
      5_000,
      50,
    );
    await bootStandby(second, 'later', ['twins']);
    expect(second.output()).toContain(
      'node identity "twin" is still registered by a process that is shutting down; taking it over',
    );
    const { boot_id: laterBoot, started_at: laterStart } = (await row()) as {
      boot_id: string | null;
      started_at: Date;
    };
    expect(laterBoot).toMatch(/^[0-9a-f-]{36}$/);
    expect(laterBoot).not.toBe(firstBoot);

    // The first finishes its drain and deregisters: the row is the later node's now, and stays
    // (never deleted and written again: the same start).
    await first.stop();
    expect(await row()).toEqual({ boot_id: laterBoot, started_at: laterStart });
    expect(second.output()).not.toContain('is also beating from another live process');
  });
});
