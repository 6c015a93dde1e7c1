import { afterAll, beforeAll } from '@jest/globals';
import type { TestDatabase } from './database.js';
import { FAST_RECOVERY, startNode } from './demo-cluster.js';
import type { DemoNode } from './demo-node.js';
import { TcpProxy } from './tcp-proxy.js';

/** The header the page sends with every state-changing request; the API refuses a write without. */
export const CSRF = { 'x-cyclium-ops': '1' };

/** What the operations API answered: its status and its JSON body (`{}` when it sent none). */
export interface OpsAnswer {
  status: number;
  body: { message?: string | string[] } & Record<string, unknown>;
}

export interface ProxiedOpsNode {
  /** The demo node, set once `beforeAll` has run. */
  readonly node: DemoNode;
  /** The proxy between the node and its database. */
  readonly proxy: TcpProxy;
  /**
   * While true, the proxy closes each connection a client writes on: the database is away. Reset
   * in `afterAll` so the node can stop cleanly. Set it, then `proxy.dropAll()` for the open ones.
   */
  away: boolean;
  /**
   * One request to the node's operations API (`/ops/api` + `path`), JSON `body` if any, with the
   * CSRF header unless `headers` are given. A plain function: it can be taken off the handle.
   */
  readonly call: (
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ) => Promise<OpsAnswer>;
}

/**
 * Registers the hooks of a suite that drives the operations API of one real demo node (`id`, with
 * `env`), reaching `database` through a proxy the suite can cut (`away`): started before the
 * suite's tests, killed after. Call it inside the `describe`, after `useDatabase()`.
 */
export function useProxiedOpsNode(
  database: TestDatabase,
  id: string,
  env: Record<string, string> = FAST_RECOVERY,
): ProxiedOpsNode {
  const call: ProxiedOpsNode['call'] = async (method, path, body, headers = CSRF) => {
    const response = await fetch(`http://127.0.0.1:${handle.node.port}/ops/api${path}`, {
      method,
      headers: {
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? (JSON.parse(text) as OpsAnswer['body']) : {} };
  };
  // Mutable here, read-only to the suite: the hooks set the node and the proxy.
  const handle = { away: false, call } as Omit<ProxiedOpsNode, 'node' | 'proxy'> & {
    node: DemoNode;
    proxy: TcpProxy;
  };
  beforeAll(async () => {
    handle.proxy = await TcpProxy.start({
      target: database.url,
      onClientData: () => (handle.away ? 'drop-and-close' : 'forward'),
    });
    handle.node = await startNode(handle.proxy.url(database.url), id, env);
  }, 60_000);
  afterAll(async () => {
    handle.away = false;
    await handle.node?.stop('SIGKILL');
    await handle.proxy?.close();
  });
  return handle;
}
