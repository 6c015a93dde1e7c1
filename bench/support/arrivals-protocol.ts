/** What `npm run bench -- arrivals` and its worker process (arrivals-node.ts) say to each other over IPC. */
/** `episode`: a manual 1-step episode per id; `floor`: three sequential commits per id (insert, update, update) on a bare connection, the least a durable begin, step and end cost. */
export type ArrivalsUnit = 'episode' | 'floor';
export type ArrivalsRequest = { kind: 'trigger'; unit: ArrivalsUnit; ids: number[] };
export type ArrivalsReply =
  | { kind: 'ready' }
  | { kind: 'done'; id: number; doneAt: number }
  | { kind: 'failed'; id: number; reason: string };

/** Milliseconds since the epoch, to a fraction: comparable across processes on one machine. */
export const clock = (): number => performance.timeOrigin + performance.now();
