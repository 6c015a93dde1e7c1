import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';
import { waitFor } from './wait-for.js';

const MATRIX_NODE = fileURLToPath(new URL('../fixtures/dist/matrix-node.js', import.meta.url));

/** One node of test/fixtures/matrix-node.ts: its env, claims and identity (no `nodeId`: minted). */
export interface MatrixNode {
  env: string;
  claims: 'off' | 'postgres';
  nodeId?: string;
  /** Boots on bootStandby(process, standby) rather than with the process. */
  standby?: string;
}

export interface MatrixTimings {
  staleAfterMs: number;
  leaseSeconds: number;
  settleMs: number;
  intervalMs: number;
  stepMs: number;
  beatMs: number;
}

/** A real process of test/fixtures/matrix-node.ts hosting `nodes`, each not on standby booted before this resolves. */
export function startMatrixProcess(
  url: string,
  nodes: MatrixNode[],
  timings: MatrixTimings,
  extra: Record<string, string> = {},
): Promise<DemoNode> {
  return startNodeProcess(MATRIX_NODE, url, {
    env: {
      MATRIX_NODES: JSON.stringify(nodes),
      MATRIX_STALE_MS: String(timings.staleAfterMs),
      MATRIX_LEASE_SECONDS: String(timings.leaseSeconds),
      MATRIX_SETTLE_MS: String(timings.settleMs),
      MATRIX_INTERVAL_MS: String(timings.intervalMs),
      MATRIX_STEP_MS: String(timings.stepMs),
      MATRIX_BEAT_MS: String(timings.beatMs),
      ...extra,
    },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

/** Boots the nodes of `group` (`standby: group`); resolves once each is up, rejects with the error of a boot that failed. */
export async function bootStandby(process: DemoNode, group: string, envs: string[]): Promise<void> {
  const response = await fetch(`http://127.0.0.1:${process.port}/boot/${group}`, {
    method: 'POST',
  });
  if (response.status !== 202)
    throw new Error(`boot ${group} on port ${process.port}: ${response.status}`);
  const failure = await waitFor(
    `the ${group} nodes on port ${process.port} to boot`,
    async () => {
      const health = await process.get<{
        nodes: Record<string, string>;
        failed: Record<string, string>;
      }>('/health');
      if (health.failed[group]) return { error: health.failed[group] };
      return envs.every((env) => health.nodes[env] !== undefined) ? { error: null } : undefined;
    },
    30_000,
    100,
  );
  if (failure?.error) throw new Error(failure.error);
}

/** Each env's node identity in that process. */
export async function identitiesOf(process: DemoNode): Promise<Record<string, string>> {
  return (await process.get<{ nodes: Record<string, string> }>('/health')).nodes;
}

/** Runs the `restart` or `fail` expectation on that process's node of `env`; returns the episode's id. */
export async function triggerOn(
  process: DemoNode,
  env: string,
  expectation: 'restart' | 'fail',
): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${process.port}/trigger/${env}/${expectation}`, {
    method: 'POST',
  });
  const body = (await response.json()) as { status: string; episodeId: string | null };
  if (response.status !== 202 || body.status !== 'started' || !body.episodeId) {
    throw new Error(
      `trigger ${expectation} in ${env} on port ${process.port}: ${response.status} ${JSON.stringify(body)}`,
    );
  }
  return body.episodeId;
}
