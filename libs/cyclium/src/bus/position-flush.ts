/**
 * A node stores its consumers' settled positions at most this often (only a window of a few seconds
 * asks for it).
 */
export const MIN_POSITION_FLUSH_MS = 250;
/**
 * Each node of a channel waits this long per node between flushes, so the cluster writes about once
 * a second.
 */
const SPACING_MS = 1_000;
/**
 * Positions that only reads without their consumer's events moved are stored this seldom at most.
 */
const IDLE_WRITE_MS = 60_000;
/**
 * Flushes retention sees within `busUndispatchedMaxAgeMs` before it may count an event as
 * undispatched.
 */
const FLUSHES_PER_WINDOW = 4;

/**
 * The shortest `busUndispatchedMaxAgeMs` the position flush can honour: a window must hold four
 * flushes, or retention deletes (and warns about) events whose dispatch is only waiting to be
 * stored.
 */
export const MIN_UNDISPATCHED_MAX_AGE_MS = FLUSHES_PER_WINDOW * MIN_POSITION_FLUSH_MS;

/**
 * How often a node stores the positions its consumers settled, on a channel of `nodes` nodes: the
 * furthest position wins, so each node waits a second per node and the cluster writes about once
 * a second; never so seldom that `undispatchedMaxAgeMs` holds fewer than four flushes.
 */
export function positionFlushMs(nodes: number, undispatchedMaxAgeMs: number): number {
  const spaced = SPACING_MS * Math.max(1, nodes);
  return Math.max(
    MIN_POSITION_FLUSH_MS,
    Math.min(spaced, undispatchedMaxAgeMs / FLUSHES_PER_WINDOW),
  );
}

/**
 * How often positions that only idle reads moved are stored: about once a minute, or four times a
 * shorter window.
 */
export function idleWriteMs(undispatchedMaxAgeMs: number): number {
  return Math.max(
    MIN_POSITION_FLUSH_MS,
    Math.min(IDLE_WRITE_MS, undispatchedMaxAgeMs / FLUSHES_PER_WINDOW),
  );
}
