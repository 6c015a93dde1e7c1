import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';

/** test/fixtures/mixed-node.ts compiled against this tree's library. */
export const MIXED_NODE = fileURLToPath(new URL('../fixtures/dist/mixed-node.js', import.meta.url));

/** One node of test/fixtures/mixed-node.ts: its env, claims and fixed identity. */
export interface MixedNode {
  env: string;
  claims: 'off' | 'postgres';
  nodeId: string;
}

export interface MixedTimings {
  stepMs: number;
  staleAfterMs: number;
  leaseSeconds: number;
  beatMs: number;
}

export interface MixedProcess extends DemoNode {
  /** The file `@cyclium/nestjs` resolved to in that process. */
  library: string;
}

/** A real process of the fixture at `main` (this tree's build, or the previous release's copy) hosting `nodes`. */
export async function startMixedProcess(
  main: string,
  url: string,
  nodes: MixedNode[],
  timings: MixedTimings,
): Promise<MixedProcess> {
  const node = await startNodeProcess(main, url, {
    env: {
      MIXED_NODES: JSON.stringify(nodes),
      MIXED_STEP_MS: String(timings.stepMs),
      MIXED_STALE_MS: String(timings.staleAfterMs),
      MIXED_LEASE_SECONDS: String(timings.leaseSeconds),
      MIXED_BEAT_MS: String(timings.beatMs),
    },
    ready: async (candidate) =>
      (await candidate.get<{ status: string }>('/health')).status === 'ok',
  });
  const { library } = await node.get<{ library: string }>('/health');
  return { ...node, library: fileURLToPath(library) };
}

/** Runs `expectation` with payload `{ key }` on that process's node of `env`; returns the episode's id. */
export async function triggerOn(
  node: DemoNode,
  env: string,
  expectation: 'restart' | 'fail',
  key: string,
): Promise<string> {
  const response = await fetch(
    `http://127.0.0.1:${node.port}/trigger/${env}/${expectation}/${key}`,
    { method: 'POST' },
  );
  const body = (await response.json()) as { status: string; episodeId: string | null };
  if (response.status !== 202 || body.status !== 'started' || !body.episodeId) {
    throw new Error(
      `trigger ${expectation} ${key} in ${env} on port ${node.port}: ${response.status} ${JSON.stringify(body)}`,
    );
  }
  return body.episodeId;
}

/** Publishes `mixed.<expectation>` with payload `{ key }` and event id `key` through that process's node of `env`. */
export async function publishOn(
  node: DemoNode,
  env: string,
  expectation: 'restart' | 'fail',
  key: string,
): Promise<void> {
  const response = await fetch(
    `http://127.0.0.1:${node.port}/publish/${env}/mixed.${expectation}/${key}`,
    { method: 'POST' },
  );
  if (response.status !== 202)
    throw new Error(
      `publish ${expectation} ${key} in ${env} on port ${node.port}: ${response.status} ${await response.text()}`,
    );
}
