/** What `npm run bench -- arrivals` and its worker process (arrivals-node.ts) say to each other over IPC. */
export type ArrivalsRequest = { kind: 'trigger'; ids: number[] };
export type ArrivalsReply = { kind: 'ready' } | { kind: 'done'; id: number; doneAt: number } | { kind: 'failed'; id: number; reason: string };

/** Milliseconds since the epoch, to a fraction: comparable across processes on one machine. */
export const clock = (): number => performance.timeOrigin + performance.now();
