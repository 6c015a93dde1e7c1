/** The message of anything thrown. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The SQLSTATE (or Node system error code) of an error, looking through TypeORM's and our own
 * wrappers.
 */
export function errorCode(error: unknown): string | undefined {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    const next = current as { driverError?: unknown; cause?: unknown };
    current = next.driverError ?? next.cause;
  }
  return undefined;
}

/** Node's socket errors when the server cannot be reached or went away. */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * pg's own words for a connection that ended under a query, a pool that could not get one in time,
 * or a query that got no answer within its `query_timeout`.
 */
const PG_MESSAGES = [
  /Connection terminated/i,
  /connection timeout/i,
  /timeout exceeded when trying to connect/i,
  /Client has encountered a connection error/i,
  /Query read timeout/,
];

/** By name too, for an error from another copy of this module. */
const UNAVAILABLE_NAMES = new Set<unknown>([
  'DatabaseUnavailableError',
  'DatabaseTimeoutError',
  'PublishQueueFullError',
]);

/**
 * True when `error` says the database is away (unreachable, restarting, shutting down, out of
 * connections) rather than that the request was wrong: the case an HTTP caller should see as 503.
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth++) {
    if (
      current instanceof DatabaseUnavailableError ||
      UNAVAILABLE_NAMES.has((current as { name?: unknown }).name)
    )
      return true;
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') {
      // 08: connection exception; 57P01-57P03: shutdown, crash, cannot connect now; 53300: too many
      // connections.
      if (
        code.startsWith('08') ||
        code === '57P01' ||
        code === '57P02' ||
        code === '57P03' ||
        code === '53300'
      )
        return true;
      if (SOCKET_CODES.has(code)) return true;
    }
    const message = current instanceof Error ? current.message : '';
    if (PG_MESSAGES.some((pattern) => pattern.test(message))) return true;
    const next = current as { driverError?: unknown; cause?: unknown };
    current = next.driverError ?? next.cause;
  }
  return false;
}

/**
 * Refusals that leave nothing written and may pass on their own: lock or statement timeout,
 * serialization failure, deadlock.
 */
const TRANSIENT_CODES = new Set(['55P03', '57014', '40001', '40P01']);

/**
 * True when the same statement may well succeed if sent again: the database is away
 * (isDatabaseUnavailable), or it refused this attempt for a reason of the moment. The library
 * retries its own episode writes on these; an HTTP caller still sees only the former as 503.
 */
export function isTransientDatabaseError(error: unknown): boolean {
  if (isDatabaseUnavailable(error)) return true;
  const code = errorCode(error);
  return code !== undefined && TRANSIENT_CODES.has(code);
}

/** A SQLSTATE: five digits or capital letters, the first two its class. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/**
 * True when PostgreSQL refused a statement for the data it carried: a value it cannot take (class
 * 22, data exception) or a constraint the row breaks (class 23). The work's own fault: sent again,
 * it fails the same way, so the work may be skipped or failed with the reason (rule 13).
 */
export function isDataFault(error: unknown): boolean {
  const code = errorCode(error);
  return (
    code !== undefined && SQLSTATE.test(code) && (code.startsWith('22') || code.startsWith('23'))
  );
}

/**
 * True when a database error must hold the work it met (a bus position, a request, a row) and be
 * retried (rule 13): the database is away, or it refused the statement for any reason but the
 * work's own data (isDataFault): a statement or lock timeout, a serialization failure, a deadlock,
 * a read-only server after a failover, a full disk, a missing grant or table. False for an error
 * that did not come from the database at all.
 */
export function holdsWork(error: unknown): boolean {
  if (isDatabaseUnavailable(error)) return true;
  const code = errorCode(error);
  return code !== undefined && SQLSTATE.test(code) && !isDataFault(error);
}

/**
 * The database could not be reached, or did not answer in time (`checkoutTimeoutMs`,
 * `queryTimeoutMs`), to do what was asked. Answer 503 and retry later.
 *
 * Whether a write took effect is **unknown**: a statement that timed out, or whose connection broke
 * under it, may have committed before the answer was lost (or may still run once a frozen server
 * resumes). Retrying the same request is safe where the library makes it idempotent: a publish
 * with the same `eventId` is stored once (an identical one is accepted again, not duplicated),
 * and a trigger with the same `dedupeKey` starts no second episode while the first is not
 * archived (the retry answers `duplicate`). Without an `eventId` or `dedupeKey` a retry may
 * store the event or start the episode twice.
 */
export class DatabaseUnavailableError extends Error {
  override readonly name: string = 'DatabaseUnavailableError';

  constructor(what: string, cause: unknown) {
    super(`${what}: the database is unavailable (${errorMessage(cause)})`, { cause });
  }
}

/**
 * The library's own bound ran out (`checkoutTimeoutMs`, `queryTimeoutMs`): the caller already
 * waited as long as it may, so work queued behind this call should not wait the same again.
 */
export class DatabaseTimeoutError extends DatabaseUnavailableError {
  override readonly name: string = 'DatabaseTimeoutError';
}

/** True when `error`, or one it wraps, is a DatabaseTimeoutError. */
export function isDatabaseTimeout(error: unknown): boolean {
  for (let current: unknown = error, depth = 0; current && depth < 5; depth++) {
    if (current instanceof DatabaseTimeoutError) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Logs a recurring task's failures once per outage, not once per tick: the first failure as a
 * warning, silence while it keeps failing, then one line when it works again.
 */
export class OutageLog {
  private failures = 0;
  private since = 0;

  constructor(
    private readonly logger: { warn(message: string): void; log(message: string): void },
    private readonly what: string,
  ) {}

  get failing(): boolean {
    return this.failures > 0;
  }

  failed(error: unknown): void {
    if (this.failures++ > 0) return;
    this.since = performance.now();
    this.logger.warn(
      `${this.what} failed: ${errorMessage(error)} (retrying; further failures are not logged ` +
        `until it works again)`,
    );
  }

  succeeded(): void {
    if (this.failures === 0) return;
    const seconds = ((performance.now() - this.since) / 1000).toFixed(1);
    this.logger.log(
      `${this.what} works again after ${this.failures} failed attempt(s) over ${seconds} s`,
    );
    this.failures = 0;
  }
}
