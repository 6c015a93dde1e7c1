import { createHash } from 'node:crypto';

/** JSON with object keys sorted, so equal payloads hash equally on every node. */
export function stableJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
}

/**
 * `schedule:<actor>:<exp>:<bucket>`; the bucket is the interval window or cron tick, ISO UTC to the
 * minute or finer.
 */
export function scheduleKey(actorId: string, expectationId: string, bucket: Date): string {
  return `schedule:${actorId}:${expectationId}:${bucket.toISOString()}`;
}

/**
 * `event:<actor>:<exp>:<hash>` of the event type, the publisher-minted event id, and the payload.
 */
export function eventKey(
  actorId: string,
  expectationId: string,
  eventType: string,
  eventId: string,
  payload: unknown,
): string {
  const hash = createHash('sha256')
    .update(`${eventType}\u0000${eventId}\u0000${stableJson(payload)}`)
    .digest('hex');
  return `event:${actorId}:${expectationId}:${hash.slice(0, 32)}`;
}
