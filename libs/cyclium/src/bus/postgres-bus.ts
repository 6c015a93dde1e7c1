import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import pg from 'pg';
import { MissingSchemaError } from '../database/missing-schema.error.js';
import { prepared, type SqlExecutor } from '../database/sql-executor.js';
import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import { LocalBus, mintBusEvent } from './local-bus.js';

/** PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more; every chunk stays below this. */
export const MAX_CHUNK_BYTES = 7_900;
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;
const SWEEP_EVERY_MS = 60_000;
const PREVIEW_CHARS = 200;

/**
 * Every chunk of one flush in one statement, so one implicit transaction and one commit per flush:
 * NOTIFY serialises commits cluster-wide, so the count of notifying commits is the cost.
 * The ordinality keeps the chunks in publish order (the planner knows unnest WITH ORDINALITY is
 * already sorted by n, so it evaluates pg_notify in that order without a Sort). A notification is
 * not durable anyway, so its commit never waits for a WAL flush.
 */
const NOTIFY = prepared(
  'bus_notify',
  `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, chunk)
     FROM unnest($2::text[]) WITH ORDINALITY AS c(chunk, n)
    ORDER BY n`,
);

/**
 * Ids are minted here rather than read back with RETURNING, so that several oversize events stored
 * by one statement can never be matched to the wrong id (RETURNING's row order is not promised).
 */
const STORE = `
  INSERT INTO cyclium_bus_payloads (id, event)
  SELECT id, event::jsonb FROM unnest($1::uuid[], $2::text[]) AS p(id, event)`;

const LOAD = prepared('bus_load_payload', `SELECT event FROM cyclium_bus_payloads WHERE id = $1`);

/** Database clock (rule 1): every node ages the rows the same way. */
const SWEEP = `DELETE FROM cyclium_bus_payloads WHERE created_at < now() - interval '1 hour'`;

interface Outgoing {
  readonly event: BusEvent;
  readonly json: string;
  readonly bytes: number;
  resolve(): void;
  reject(error: unknown): void;
}

interface Item {
  readonly json: string;
  readonly bytes: number;
}

/**
 * Events across nodes over LISTEN/NOTIFY on one channel per stack and env (see busChannel).
 *
 * Publishing queues the event and flushes after a short window (`flushWindowMs`, default 20 ms):
 * everything published meanwhile leaves in one statement (as JSON arrays cut into chunks under the
 * payload limit), and flushes never overlap, so events from one publisher arrive in publish order
 * and a busy node coalesces more per commit, not less. The window matters because every NOTIFY
 * costs two commits, the sender's and each listener's (a listener reads the notification queue in
 * a transaction of its own): a flush per tick would cost a busy node two commits per event. An event too large for a chunk is stored in cyclium_bus_payloads and
 * travels as `{ "ref": id }`. The publisher hears its own NOTIFY like every other node, so each
 * node, the publisher included, dispatches each event exactly once.
 *
 * Receiving uses one dedicated connection, not a pool's: a pooled client would be handed to other
 * work and its LISTEN would leak or vanish. While that connection is down this node misses the
 * notifications sent meanwhile (NOTIFY has no replay); it reconnects with backoff until stopped.
 * Payloads make a JSON round trip, so handlers see what JSON.stringify kept.
 */
export class PostgresBus extends Bus {
  private readonly logger = new Logger(PostgresBus.name);
  private readonly local = new LocalBus();

  private outbox: Outgoing[] = [];
  private flushScheduled = false;
  private flushTimer: NodeJS.Timeout | undefined;
  private flushing = false;
  private lastSweepAt = Number.NEGATIVE_INFINITY;
  /** Notifications are processed one after another so a stored payload's load never reorders events. */
  private inbox: Promise<void> = Promise.resolve();

  private client: pg.Client | undefined;
  private isListening = false;
  private stopped = true;
  private starting: Promise<void> | undefined;
  private reconnecting: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private wakeRetry: (() => void) | undefined;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly listenConfig: () => pg.ClientConfig,
    readonly channel: string,
    private readonly flushWindowMs = 20,
  ) {
    super();
    // LISTEN silently truncates a longer identifier while pg_notify rejects it: the two would never meet.
    if (typeof channel !== 'string' || channel === '' || Buffer.byteLength(channel, 'utf8') > 63) {
      throw new TypeError(`PostgresBus: channel must be 1 to 63 bytes (got ${JSON.stringify(channel)})`);
    }
  }

  /** True while the dedicated connection is LISTENing; false before start, after stop and while reconnecting. */
  get listening(): boolean {
    return this.isListening;
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    let event: BusEvent<P>;
    let json: string;
    try {
      event = mintBusEvent(type, payload, options);
      // Serialised now so a cyclic or BigInt payload fails its own publish, not the whole batch.
      json = JSON.stringify(event);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<BusEvent<P>>((resolve, reject) => {
      this.outbox.push({ event, json, bytes: Buffer.byteLength(json, 'utf8'), resolve: () => resolve(event), reject });
      this.scheduleFlush();
    });
  }

  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.local.subscribe(type, handler);
  }

  /** Connects the dedicated client and LISTENs. Rejects if the first attempt fails; later drops are retried. */
  start(): Promise<void> {
    this.starting ??= this.firstListen();
    return this.starting;
  }

  /** Stops reconnecting and closes the LISTEN connection. Publishing keeps working (it uses the host pool). */
  async stop(): Promise<void> {
    this.stopped = true;
    this.starting = undefined;
    clearTimeout(this.retryTimer);
    this.wakeRetry?.();
    const client = this.client;
    this.client = undefined;
    this.isListening = false;
    await client?.end().catch(() => undefined);
    await this.reconnecting;
  }

  /** Sends what is waiting for the flush window now, and resolves once nothing is left to send. */
  async flushPending(): Promise<void> {
    while (this.outbox.length > 0 || this.flushing) {
      if (this.flushScheduled && !this.flushing) {
        clearTimeout(this.flushTimer);
        this.flushScheduled = false;
        void this.flush();
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  // ── publishing ────────────────────────────────────────────────────────────────────────────────

  private scheduleFlush(): void {
    if (this.flushScheduled || this.flushing || this.outbox.length === 0) return;
    this.flushScheduled = true;
    const flush = () => {
      this.flushScheduled = false;
      void this.flush();
    };
    if (this.flushWindowMs > 0) this.flushTimer = setTimeout(flush, this.flushWindowMs);
    else setImmediate(flush);
  }

  private async flush(): Promise<void> {
    const batch = this.outbox;
    this.outbox = [];
    this.flushing = true;
    this.sweepStoredPayloads();
    try {
      for (const outgoing of await this.send(batch)) outgoing.resolve();
    } catch (error) {
      // Settling twice is a no-op, so events already rejected on their own keep their own reason.
      for (const outgoing of batch) outgoing.reject(error);
    } finally {
      this.flushing = false;
      this.scheduleFlush();
    }
  }

  /** Returns the events that went out: an oversize event that could not be stored fails alone. */
  private async send(batch: Outgoing[]): Promise<Outgoing[]> {
    const refs = await this.storeOversize(batch.filter(isOversize));
    const sendable = batch.filter((o) => !isOversize(o) || refs.has(o));
    if (sendable.length === 0) return sendable;
    const items = sendable.map((o): Item => {
      const ref = refs.get(o);
      if (ref === undefined) return o;
      const json = JSON.stringify({ ref });
      return { json, bytes: Buffer.byteLength(json, 'utf8') };
    });
    await this.sql.query(NOTIFY([this.channel, toChunks(items)]));
    return sendable;
  }

  /**
   * Stores every oversize event of a flush in one statement, committed before the NOTIFY so a
   * receiver can always load what it is told about. jsonb refuses some JSON that NOTIFY text
   * accepts (\u0000, lone surrogates): then the events are retried one by one so only the
   * offenders reject.
   */
  private async storeOversize(oversize: Outgoing[]): Promise<Map<Outgoing, string>> {
    const refs = new Map<Outgoing, string>();
    if (oversize.length === 0) return refs;
    const ids = oversize.map(() => randomUUID());
    try {
      await this.sql.query(STORE, [ids, oversize.map((o) => o.json)]);
      oversize.forEach((o, i) => refs.set(o, ids[i] as string));
      return refs;
    } catch (error) {
      if (codeOf(error) === '42P01') {
        for (const o of oversize) o.reject(new MissingSchemaError('cyclium_bus_payloads'));
        return refs;
      }
      if (!codeOf(error)?.startsWith('22')) throw error;
    }
    for (const [i, o] of oversize.entries()) {
      const id = ids[i] as string;
      try {
        await this.sql.query(STORE, [[id], [o.json]]);
        refs.set(o, id);
      } catch (error) {
        if (!codeOf(error)?.startsWith('22')) throw error;
        o.reject(
          new TypeError(
            `bus: event ${o.event.eventId} ("${o.event.type}") is ${o.bytes} bytes, so it travels through ` +
              `cyclium_bus_payloads as jsonb, which refused it (${messageOf(error)}): ` +
              'remove NUL characters and unpaired surrogates from its payload',
          ),
        );
      }
    }
    return refs;
  }

  /** At most once a minute, never awaited: a slow delete must not hold up a publish. */
  private sweepStoredPayloads(): void {
    const now = performance.now();
    if (now - this.lastSweepAt < SWEEP_EVERY_MS) return;
    this.lastSweepAt = now;
    this.sql.query(SWEEP).then(
      (result) => {
        if (result.rowCount) this.logger.debug(`swept ${result.rowCount} stored bus payload(s) older than an hour`);
      },
      (error: unknown) => this.logger.warn(`could not sweep cyclium_bus_payloads: ${messageOf(error)}`),
    );
  }

  // ── receiving ─────────────────────────────────────────────────────────────────────────────────

  private async firstListen(): Promise<void> {
    this.stopped = false;
    try {
      await this.listen();
    } catch (error) {
      if (this.stopped) return; // stop() closed the connection under us
      this.starting = undefined;
      throw error;
    }
  }

  private async listen(): Promise<void> {
    const config = this.listenConfig();
    // An idle LISTEN connection sends nothing, so without keepalive a dead peer would go unnoticed.
    const client = new pg.Client({ ...config, keepAlive: config.keepAlive ?? true });
    this.client = client;
    let live = false;
    let gone = false;
    const onGone = (error: Error) => {
      if (gone) return;
      gone = true;
      if (live) this.lost(client, error);
    };
    // Both usually fire on a drop (error, then end); an 'error' without a listener would crash the process.
    client.on('error', onGone);
    client.on('end', () => onGone(new Error('the connection ended')));
    client.on('notification', (message) => this.onNotification(message));
    try {
      await client.connect();
      await client.query(`LISTEN ${quoteIdentifier(this.channel)}`);
      if (gone) throw new Error('the connection closed right after LISTEN');
    } catch (error) {
      if (this.client === client) this.client = undefined;
      void client.end().catch(() => undefined);
      throw error;
    }
    if (this.client !== client) {
      // stop() ran while we were connecting.
      void client.end().catch(() => undefined);
      return;
    }
    live = true;
    this.isListening = true;
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return; // our own stop()
    this.client = undefined;
    this.isListening = false;
    void client.end().catch(() => undefined);
    if (this.stopped) return;
    this.logger.warn(
      `lost the LISTEN connection on ${this.channel} (${error.message}); reconnecting. ` +
        'Events notified before it is back are not received by this node',
    );
    this.reconnecting ??= this.retryUntilListening().finally(() => (this.reconnecting = undefined));
  }

  private async retryUntilListening(): Promise<void> {
    let delay = FIRST_RETRY_MS;
    while (!this.stopped) {
      await this.pause(delay);
      if (this.stopped) return;
      try {
        await this.listen();
        if (this.isListening) this.logger.log(`listening again on ${this.channel}`);
        return;
      } catch (error) {
        if (this.stopped) return;
        delay = Math.min(delay * 2, MAX_RETRY_MS);
        this.logger.warn(`could not LISTEN on ${this.channel} (${messageOf(error)}); retrying in ${delay} ms`);
      }
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wakeRetry = resolve;
      this.retryTimer = setTimeout(resolve, ms);
      // A host that exits without stop() must not be held open by a retry.
      this.retryTimer.unref();
    });
  }

  private onNotification(message: pg.Notification): void {
    if (message.channel !== this.channel) return;
    const payload = message.payload ?? '';
    this.inbox = this.inbox
      .then(() => this.receive(payload))
      .catch((error: unknown) => this.logger.error(`skipped a notification on ${this.channel}: ${messageOf(error)}`));
  }

  private async receive(payload: string): Promise<void> {
    let items: unknown;
    try {
      items = JSON.parse(payload);
    } catch {
      this.logger.error(`skipped a notification on ${this.channel} that is not JSON: ${preview(payload)}`);
      return;
    }
    if (!Array.isArray(items)) {
      this.logger.error(`skipped a notification on ${this.channel} that is not an array of events: ${preview(payload)}`);
      return;
    }
    // Loads run side by side; delivery still follows the array's order.
    const events = await Promise.all(items.map((item: unknown) => this.resolveItem(item)));
    for (const event of events) {
      if (event) this.local.deliver(event);
    }
  }

  private async resolveItem(item: unknown): Promise<BusEvent | undefined> {
    let candidate = item;
    if (isRef(item)) {
      try {
        const { rows } = await this.sql.query<{ event: unknown }>(LOAD([item.ref]));
        if (rows.length === 0) {
          this.logger.error(`skipped stored event ${item.ref} on ${this.channel}: no such row (swept after an hour?)`);
          return undefined;
        }
        candidate = rows[0]?.event;
      } catch (error) {
        this.logger.error(`skipped stored event ${item.ref} on ${this.channel}: ${messageOf(error)}`);
        return undefined;
      }
    }
    if (!isBusEvent(candidate)) {
      this.logger.error(`skipped a malformed event on ${this.channel}: ${preview(JSON.stringify(candidate) ?? String(candidate))}`);
      return undefined;
    }
    return candidate;
  }
}

/** Packs items into JSON arrays whose UTF-8 length stays under MAX_CHUNK_BYTES, keeping their order. */
function toChunks(items: readonly Item[]): string[] {
  const chunks: string[] = [];
  let current: string[] = [];
  let bytes = 2; // the brackets
  for (const item of items) {
    const added = (current.length > 0 ? 1 : 0) + item.bytes;
    if (current.length > 0 && bytes + added >= MAX_CHUNK_BYTES) {
      chunks.push(`[${current.join(',')}]`);
      current = [];
      bytes = 2;
    }
    bytes += (current.length > 0 ? 1 : 0) + item.bytes;
    current.push(item.json);
  }
  if (current.length > 0) chunks.push(`[${current.join(',')}]`);
  return chunks;
}

/** Too large for any chunk even alone (the brackets included): travels by reference. */
function isOversize(outgoing: Outgoing): boolean {
  return outgoing.bytes + 2 >= MAX_CHUNK_BYTES;
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

function isRef(item: unknown): item is { ref: string } {
  return typeof item === 'object' && item !== null && !('type' in item) && typeof (item as { ref?: unknown }).ref === 'string';
}

function isBusEvent(item: unknown): item is BusEvent {
  if (typeof item !== 'object' || item === null) return false;
  const event = item as Partial<Record<keyof BusEvent, unknown>>;
  return typeof event.type === 'string' && typeof event.eventId === 'string' && typeof event.publishedAt === 'string';
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function preview(text: string): string {
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}…` : text;
}
