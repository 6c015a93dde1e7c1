import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';

const BUS_NODE = fileURLToPath(new URL('../fixtures/dist/bus-node.js', import.meta.url));

/** A real process of test/fixtures/bus-node.ts (claims off, fixed identity `id`), hosting `actors` (comma-separated). */
export function startBusNode(
  url: string,
  id: string,
  actors: string,
  env: Record<string, string> = {},
): Promise<DemoNode> {
  return startNodeProcess(BUS_NODE, url, {
    env: { CYCLIUM_NODE_ID: id, BUS_ACTORS: actors, ...env },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}
