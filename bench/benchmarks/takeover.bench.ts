import { freePort } from '@cyclium/nestjs/testing';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDemoDatabase } from '@cyclium/demo/database';
import { printTable } from '../support/measure.js';

const RUNS = 5;
const LEASE_SECONDS = 2;
const INTERVAL_MS = 500;
const STEP_MS = 200;
const DEMO_MAIN = fileURLToPath(new URL('../../../apps/demo/dist/main.js', import.meta.url));

interface Node {
  child: ChildProcess;
  port: number;
}

async function startNode(url: string, id: string): Promise<Node> {
  const port = await freePort();
  const child = spawn(process.execPath, [DEMO_MAIN], {
    env: {
      ...process.env,
      DATABASE_URL: url,
      PORT: String(port),
      CYCLIUM_NODE_ID: id,
      NO_COLOR: '1',
      DEMO_LEASE_SECONDS: String(LEASE_SECONDS),
      DEMO_STALE_AFTER_MS: String(LEASE_SECONDS * 1000),
      DEMO_RECOVERY_INTERVAL_MS: String(INTERVAL_MS),
      DEMO_SETTLE_MS: '200',
      DEMO_DB_POOL: '4',
    },
    stdio: 'ignore',
  });
  const deadline = Date.now() + 30_000;
  while (
    !(await fetch(`http://127.0.0.1:${port}/health`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline || child.exitCode !== null)
      throw new Error(`node ${id} did not come up`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { child, port };
}

async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * kill -9 of the node running a 5-step episode (policy restart), to the first step the restarted
 * episode completes on a surviving node, measured on the database clock, over 5 runs. The bound
 * is lease + recovery interval: the lease must lapse before anyone may take the claim, and a sweep
 * comes at most one interval later (staleAfterMs is set equal to the lease).
 */
export async function takeoverBench(url: string): Promise<void> {
  await migrateDemoDatabase(url);
  const db = new pg.Pool({ connectionString: url, max: 2 });
  db.on('error', () => undefined);
  const survivors = await Promise.all(['survivor-1', 'survivor-2'].map((id) => startNode(url, id)));
  const toResumed: number[] = [];
  const toFirstStep: number[] = [];
  try {
    for (let run = 1; run <= RUNS; run++) {
      const victim = await startNode(url, `victim-${run}`);
      const response = await fetch(
        `http://127.0.0.1:${victim.port}/actors/resource_rebalancer/rebalance`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ payload: { resource: `takeover-${run}`, stepMs: STEP_MS } }),
        },
      );
      const { episodeId } = (await response.json()) as { episodeId: string };
      await until(async () => {
        const { rows } = await db.query(
          `SELECT 1 FROM cyclium_episode_steps WHERE episode_id = $1 AND kind = 'step'`,
          [episodeId],
        );
        return rows.length > 0 ? true : undefined;
      }, 10_000);
      const killedAt = (await db.query(`SELECT clock_timestamp() AS at`)).rows[0].at as Date;
      victim.child.kill('SIGKILL');

      const { resumedAt, firstStepAt } = await until(async () => {
        const { rows } = await db.query(
          `SELECT r.created_at AS resumed_at,
                  (SELECT min(s.created_at) FROM cyclium_episode_steps s
                    WHERE s.episode_id = r.episode_id AND s.kind = 'step' AND s.step_no > r.step_no) AS first_step_at
             FROM cyclium_episode_steps r WHERE r.episode_id = $1 AND r.name = 'resumed'`,
          [episodeId],
        );
        return rows[0]?.first_step_at
          ? { resumedAt: rows[0].resumed_at as Date, firstStepAt: rows[0].first_step_at as Date }
          : undefined;
      }, 30_000);
      toResumed.push(resumedAt.getTime() - killedAt.getTime());
      toFirstStep.push(firstStepAt.getTime() - killedAt.getTime());
    }
  } finally {
    for (const node of survivors) node.child.kill('SIGKILL');
    await db.end();
  }
  const stats = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return {
      min: sorted[0],
      median: sorted[Math.floor(sorted.length / 2)],
      max: sorted[sorted.length - 1],
    };
  };
  const bound = LEASE_SECONDS * 1000 + INTERVAL_MS;
  const resumed = stats(toResumed);
  const first = stats(toFirstStep);
  printTable(
    `takeover: kill -9 → restart on a peer, ${RUNS} runs (lease ${LEASE_SECONDS} s, recovery interval ${INTERVAL_MS} ms, steps of ${STEP_MS} ms)`,
    [
      { measure: 'kill → resumed marker (ms)', ...resumed, 'bound lease + interval': bound },
      {
        measure: 'kill → first new step done (ms)',
        ...first,
        'bound lease + interval': `${bound} (+ one ${STEP_MS} ms step)`,
      },
    ],
  );
}
