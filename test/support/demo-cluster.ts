import type pg from 'pg';
import { startDemoNode, type DemoNode } from './demo-node.js';
import { waitFor } from './wait-for.js';

/** Short timings so crashes, drains and takeovers happen within seconds. */
export const FAST_RECOVERY = {
  DEMO_LEASE_SECONDS: '2',
  DEMO_SETTLE_MS: '300',
  DEMO_STALE_AFTER_MS: '3000',
  DEMO_RECOVERY_INTERVAL_MS: '300',
  DEMO_SHUTDOWN_MS: '2000',
  DEMO_JITTER_MS: '20',
  DEMO_NODE_BEAT_MS: '1000',
  DEMO_DB_POOL: '6',
};

export interface Rebalance {
  resource: string;
  stepMs?: number;
  ignoreAbortAtStep?: number;
  outputKey?: string;
  failAtStep?: number;
  failTimes?: number;
  sleepMs?: number;
  slowAtStep?: number;
  slowStepMs?: number;
}

/** A demo node with its node id and the given timings. */
export function startNode(
  url: string,
  id: string,
  env: Record<string, string> = FAST_RECOVERY,
): Promise<DemoNode> {
  return startDemoNode(url, { ...env, CYCLIUM_NODE_ID: id });
}

export async function post<T>(node: DemoNode, path: string, body: unknown): Promise<T> {
  const response = await fetch(`http://127.0.0.1:${node.port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.status !== 202)
    throw new Error(`POST ${path} → ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

/** Starts a rebalance episode on that very node; returns its id. */
export async function rebalanceOn(
  node: DemoNode,
  payload: Rebalance,
  expectation = 'rebalance',
): Promise<string> {
  const { status, episodeId } = await post<{ status: string; episodeId: string | null }>(
    node,
    `/actors/resource_rebalancer/${expectation}`,
    { payload },
  );
  if (status !== 'started' || !episodeId)
    throw new Error(`rebalance on port ${node.port} was ${status}`);
  return episodeId;
}

export async function episodeRow(db: pg.Pool, id: string): Promise<Record<string, unknown>> {
  return (await db.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows[0];
}

export async function journal(
  db: pg.Pool,
  id: string,
): Promise<Array<{ step_no: number; kind: string; name: string; created_at: Date }>> {
  return (
    await db.query(
      `SELECT step_no, kind, name, created_at FROM cyclium_episode_steps WHERE episode_id = $1 ORDER BY step_no`,
      [id],
    )
  ).rows;
}

/** How many times each step's side effect happened, by step name. */
export async function sideEffects(db: pg.Pool, id: string): Promise<Record<string, number>> {
  const { rows } = await db.query(
    `SELECT step, count(*)::int AS n FROM demo_rebalance_log WHERE episode_id = $1 GROUP BY step`,
    [id],
  );
  return Object.fromEntries(rows.map((r) => [r.step, r.n]));
}

export function waitForStatus(
  db: pg.Pool,
  id: string,
  status: string,
  timeoutMs = 30_000,
): Promise<Record<string, unknown>> {
  return waitFor(
    `episode ${id} to be ${status}`,
    async () => {
      const row = await episodeRow(db, id);
      return row?.status === status ? row : undefined;
    },
    timeoutMs,
    100,
  ) as Promise<Record<string, unknown>>;
}

export async function stepsJournaled(db: pg.Pool, id: string): Promise<string[]> {
  return (await journal(db, id)).filter((j) => j.kind === 'step').map((j) => j.name);
}
