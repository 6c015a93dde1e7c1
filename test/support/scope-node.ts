import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';

const SCOPE_NODE = fileURLToPath(new URL('../fixtures/dist/scope-node.js', import.meta.url));

/** One node of test/fixtures/scope-node.ts: its identity, stack, env and mode, and more of its variables. */
export interface ScopeNodeConfig {
  id: string;
  stack?: string;
  env?: string;
  mode?: 'full' | 'trigger_only';
  extra?: Record<string, string>;
}

/** A real process of test/fixtures/scope-node.ts, answering before this resolves. */
export function startScopeNode(url: string, config: ScopeNodeConfig): Promise<DemoNode> {
  return startNodeProcess(SCOPE_NODE, url, {
    env: {
      CYCLIUM_NODE_ID: config.id,
      SCOPE_STACK: config.stack ?? '',
      SCOPE_ENV: config.env ?? '',
      SCOPE_MODE: config.mode ?? 'full',
      ...config.extra,
    },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

/** POSTs `body` as JSON to a node; answers the parsed reply (null for 204). */
export async function postTo<T>(node: DemoNode, path: string, body: unknown): Promise<T> {
  const response = await fetch(`http://127.0.0.1:${node.port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok)
    throw new Error(
      `POST ${path} on port ${node.port} → ${response.status}: ${await response.text()}`,
    );
  return (response.status === 204 ? null : await response.json()) as T;
}
