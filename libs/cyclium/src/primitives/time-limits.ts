/**
 * The longest delay Node's timers take: 2^31 - 1 ms, about 24.8 days. A longer one fires at once
 * (with a TimeoutOverflowWarning), so an option that feeds a timer is bounded by it, and a timer
 * that may wait longer (an `every` bucket) waits in steps of it.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * The longest time window an option may set: a century. Windows are 64-bit everywhere (doubles in
 * JavaScript, intervals and timestamps in SQL); this keeps `now() ± window` far inside what
 * PostgreSQL's timestamps hold (4713 BC to 294276 AD), so no comparison can overflow.
 */
export const MAX_WINDOW_MS = 3_155_760_000_000;
