import { fileURLToPath } from 'node:url';
import { startNodeProcess, type DemoNode } from './demo-node.js';

const WRITE_NODE = fileURLToPath(new URL('../fixtures/dist/write-node.js', import.meta.url));

/** A real process of test/fixtures/write-node.ts (claims postgres, fixed identity `id`). */
export function startWriteNode(
  url: string,
  id: string,
  env: Record<string, string> = {},
): Promise<DemoNode> {
  return startNodeProcess(WRITE_NODE, url, {
    env: { CYCLIUM_NODE_ID: id, ...env },
    ready: async (node) => (await node.get<{ status: string }>('/health')).status === 'ok',
  });
}

/** Starts one `writer.work` episode on that node; its id. */
export async function triggerWrite(node: DemoNode): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${node.port}/trigger`, { method: 'POST' });
  const body = (await response.json()) as { status: string; episodeId: string | null };
  if (response.status !== 202 || body.status !== 'started' || !body.episodeId) {
    throw new Error(`trigger on port ${node.port} → ${response.status} ${JSON.stringify(body)}`);
  }
  return body.episodeId;
}
