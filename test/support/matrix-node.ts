import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';
import { waitFor } from './wait-for.js';

const MATRIX_NODE = fileURLToPath(new URL('../fixtures/dist/matrix-node.js', import.meta.url));

/** One node of test/fixtures/matrix-node.ts: its env, claims and identity (no `nodeId`: minted). */
export interface MatrixNode {
  env: string;
  claims: 'off' | 'postgres';
  nodeId?: string;
}

export interface MatrixTimings {
  staleAfterMs: number;
  leaseSeconds: number;
  settleMs: number;
  intervalMs: number;
  stepMs: number;
  beatMs: number;
}

/**
 * A real process of test/fixtures/matrix-node.ts hosting `nodes`, each booted before this
 * resolves; with `standby`, only loaded: its nodes boot on bootMatrixProcess.
 */
export function startMatrixProcess(url: string, nodes: MatrixNode[], timings: MatrixTimings, standby = false): Promise<DemoNode> {
  return startNodeProcess(MATRIX_NODE, url, {
    env: {
      MATRIX_NODES: JSON.stringify(nodes),
      MATRIX_STALE_MS: String(timings.staleAfterMs),
      MATRIX_LEASE_SECONDS: String(timings.leaseSeconds),
      MATRIX_SETTLE_MS: String(timings.settleMs),
      MATRIX_INTERVAL_MS: String(timings.intervalMs),
      MATRIX_STEP_MS: String(timings.stepMs),
      MATRIX_BEAT_MS: String(timings.beatMs),
      MATRIX_STANDBY: standby ? '1' : undefined,
    },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === (standby ? 'waiting' : 'ok'),
  });
}

/** Boots the nodes of a process started on standby; resolves once they are all up. */
export async function bootMatrixProcess(process: DemoNode): Promise<void> {
  const response = await fetch(`http://127.0.0.1:${process.port}/boot`, { method: 'POST' });
  if (response.status !== 202) throw new Error(`boot on port ${process.port}: ${response.status}`);
  await waitFor(`the nodes on port ${process.port} to boot`, async () => (await process.get<{ status: string }>('/health')).status === 'ok', 30_000, 100);
}

/** Each env's node identity in that process. */
export async function identitiesOf(process: DemoNode): Promise<Record<string, string>> {
  return (await process.get<{ nodes: Record<string, string> }>('/health')).nodes;
}

/** Runs the `restart` or `fail` expectation on that process's node of `env`; returns the episode's id. */
export async function triggerOn(process: DemoNode, env: string, expectation: 'restart' | 'fail'): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${process.port}/trigger/${env}/${expectation}`, { method: 'POST' });
  const body = (await response.json()) as { status: string; episodeId: string | null };
  if (response.status !== 202 || body.status !== 'started' || !body.episodeId) {
    throw new Error(`trigger ${expectation} in ${env} on port ${process.port}: ${response.status} ${JSON.stringify(body)}`);
  }
  return body.episodeId;
}
