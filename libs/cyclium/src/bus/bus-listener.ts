import { Logger } from '@nestjs/common';
import pg from 'pg';
import { errorMessage } from '../sql/database-errors.js';
import { BusEcho, type BusEchoOptions } from './bus-echo.js';

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;
/**
 * Keepalive probes start after this much silence (the OS default is two hours); the echo bounds
 * detection, this frees the socket.
 */
const KEEPALIVE_DELAY_MS = 10_000;

export interface BusListenerHandlers {
  /** A NOTIFY arrived on the channel, with its payload: a wake-up ('') or a dispatch signal. */
  onNotify(payload: string): void;
  /** LISTEN is in place, at start or after a reconnect: read what may have been missed. */
  onListening(): void;
}

/**
 * The one connection on which a node LISTENs for wake-ups. It is a client of its own, not a
 * pool's: a pooled client would be handed to other work and its LISTEN would leak or vanish.
 * When the connection drops it is discarded and a new one is tried with backoff (capped low, so a
 * database that comes back is heard from within a couple of seconds) until `stop()`. Nothing is
 * lost meanwhile: events live in a table and the reader catches up after every reconnect. A
 * connection that stays open but hears nothing (half-open, or a pooler that drops notifications)
 * is caught by the echo self-check (see BusEcho).
 */
export class BusListener {
  private readonly logger = new Logger('CycliumBus');
  private client: pg.Client | undefined;
  private isListening = false;
  private stopped = true;
  private starting: Promise<void> | undefined;
  private reconnecting: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private wakeRetry: (() => void) | undefined;
  /**
   * Monotonic time the connection was lost; undefined while listening or before the first start.
   */
  private downSince: number | undefined;
  private readonly echo: BusEcho | undefined;

  constructor(
    private readonly config: () => pg.ClientConfig,
    readonly channel: string,
    private readonly handlers: BusListenerHandlers,
    echo?: BusEchoOptions,
  ) {
    this.echo = echo && echo.intervalMs > 0 ? new BusEcho(channel, echo) : undefined;
  }

  get listening(): boolean {
    return this.isListening;
  }

  /** How long the connection has been down (0 while listening). */
  get disconnectedForMs(): number {
    return this.downSince === undefined ? 0 : performance.now() - this.downSince;
  }

  /** Why the bus is degraded (its LISTEN connection does not hear its own echo), or undefined. */
  get degradedReason(): string | undefined {
    return this.echo?.degradedReason;
  }

  /**
   * Since the LISTEN connection last heard anything on the channel; null before the first, or with
   * the self-check off.
   */
  get heardAgoMs(): number | null {
    return this.echo?.lastHeardAgoMs ?? null;
  }

  /** Connects and LISTENs. Rejects if the first attempt fails; later drops are retried. */
  start(): Promise<void> {
    this.starting ??= this.firstListen();
    return this.starting;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.starting = undefined;
    clearTimeout(this.retryTimer);
    this.wakeRetry?.();
    this.echo?.stop();
    const client = this.client;
    this.client = undefined;
    this.isListening = false;
    this.downSince = undefined;
    await client?.end().catch(() => undefined);
    await this.reconnecting;
  }

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
    const config = this.config();
    // An idle LISTEN connection sends nothing, so without keepalive a dead peer would go unnoticed.
    const client = new pg.Client({
      ...config,
      keepAlive: config.keepAlive ?? true,
      keepAliveInitialDelayMillis: config.keepAliveInitialDelayMillis ?? KEEPALIVE_DELAY_MS,
    });
    this.client = client;
    let live = false;
    let gone = false;
    const onGone = (error: Error) => {
      if (gone) return;
      gone = true;
      if (live) this.lost(client, error);
    };
    // Both usually fire on a drop (error, then end); an 'error' without a listener would crash the
    // process.
    client.on('error', onGone);
    client.on('end', () => onGone(new Error('the connection ended')));
    client.on('notification', (message) => {
      if (message.channel !== this.channel) return;
      this.echo?.heard();
      this.handlers.onNotify(message.payload ?? '');
    });
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
    this.downSince = undefined;
    this.echo?.watch({
      probe: async () => void (await client.query('SELECT 1')),
      reconnect: (reason) => this.replace(client, reason),
    });
    this.handlers.onListening();
  }

  /**
   * Gives up on a connection that answers nothing: closing it politely would wait on the dead peer.
   */
  private replace(client: pg.Client, reason: string): void {
    if (this.client !== client) return;
    this.lost(client, new Error(`the LISTEN connection was replaced: ${reason}`));
    (
      client as unknown as { connection?: { stream?: { destroy(): void } } }
    ).connection?.stream?.destroy();
  }

  private lost(client: pg.Client, error: Error): void {
    if (this.client !== client) return; // our own stop()
    this.client = undefined;
    this.isListening = false;
    this.downSince = performance.now();
    this.echo?.unwatch();
    void client.end().catch(() => undefined);
    if (this.stopped) return;
    this.logger.warn(
      `lost the LISTEN connection on ${this.channel} (${error.message}); reconnecting, then ` +
        `catching up from the events table`,
    );
    this.reconnecting ??= this.retryUntilListening().finally(() => (this.reconnecting = undefined));
  }

  private async retryUntilListening(): Promise<void> {
    let delay = FIRST_RETRY_MS;
    let failures = 0;
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
        // Once, then quietly: a database that is away for minutes must not flood the log.
        if (failures++ === 0)
          this.logger.warn(
            `could not LISTEN on ${this.channel} (${errorMessage(error)}); retrying every ` +
              `${MAX_RETRY_MS} ms at most`,
          );
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
}

function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
