import { Logger } from '@nestjs/common';
import type { SqlExecutor } from '../sql/sql-executor.js';

/** Not durable, like the bus's own NOTIFYs: an echo never waits for a WAL flush. */
const ECHO = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`;
/** What an echo says on the channel: nothing to read (see BusNotifier.parse). */
export const ECHO_PAYLOAD = 'e:';

export interface BusEchoOptions {
  /**
   * Sends the echo; must not be the LISTEN connection (through a pooler it would hear itself on the
   * same server connection).
   */
  sql: SqlExecutor;
  /** An echo after this much quiet on the channel; 0 turns the self-check off. */
  intervalMs: number;
  /**
   * An echo not heard within this marks the bus degraded; the LISTEN connection then has as long
   * again to answer a query.
   */
  timeoutMs: number;
}

/** What the echo needs from the LISTEN connection it checks. */
export interface EchoedConnection {
  /** A round trip on the LISTEN connection itself: resolves when it answers. */
  probe(): Promise<void>;
  /** Drops the LISTEN connection (it answers nothing: half-open) and connects again. */
  reconnect(reason: string): void;
}

/**
 * The LISTEN connection's self-check. TCP keepalive alone notices a dead peer only after the OS's
 * probe count (minutes), and a pooler in transaction mode accepts LISTEN but never forwards the
 * notifications: both look like a quiet bus. Anything heard on the channel proves the connection
 * hears; when it has heard nothing for `intervalMs`, the node NOTIFYs an echo on the channel (from
 * another connection) and expects to hear it within `timeoutMs`. Every node hears every echo, so an
 * idle cluster sends about one per interval whatever its size. Unheard, the bus is degraded
 * (health: not ready; one warn log); then the LISTEN connection must answer a `SELECT 1`: silent,
 * it is half-open and is replaced; answering, it is alive but deaf (a pooler), and replacing it
 * would not help, so it is left alone and the echo keeps checking at the same pace. Hearing
 * anything clears the verdict.
 */
export class BusEcho {
  private readonly logger = new Logger('CycliumBus');
  private timer: NodeJS.Timeout | undefined;
  private pending: { token: number; deadline: NodeJS.Timeout } | undefined;
  private target: EchoedConnection | undefined;
  private sequence = 0;
  private degradedBy: string | undefined;
  private lastHeardAt: number | undefined;
  /**
   * Since the connection was watched or last heard something: the echo waits for this much quiet.
   */
  private quietSince = 0;

  constructor(
    private readonly channel: string,
    private readonly options: BusEchoOptions,
  ) {}

  /** Why the bus is degraded, or undefined while its connection hears. */
  get degradedReason(): string | undefined {
    return this.degradedBy;
  }

  /**
   * Since the LISTEN connection last heard anything on the channel (an echo or not); null before
   * the first.
   */
  get lastHeardAgoMs(): number | null {
    return this.lastHeardAt === undefined ? null : performance.now() - this.lastHeardAt;
  }

  /** Checks `connection` from now on: an echo after every `intervalMs` of quiet. */
  watch(connection: EchoedConnection): void {
    if (this.options.intervalMs <= 0) return;
    this.unwatch();
    this.target = connection;
    this.quietSince = performance.now();
    // Checked twice an interval, so a quiet connection echoes within 1.5 intervals.
    this.timer = setInterval(
      () => this.tick(),
      Math.max(1, Math.floor(this.options.intervalMs / 2)),
    );
    this.timer.unref();
  }

  /**
   * The connection is gone (a reconnect follows, or stop): the verdict stands until something is
   * heard.
   */
  unwatch(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    clearTimeout(this.pending?.deadline);
    this.pending = undefined;
    this.target = undefined;
  }

  stop(): void {
    this.unwatch();
    this.degradedBy = undefined;
  }

  /** A NOTIFY arrived on the channel (any payload): the LISTEN connection hears. */
  heard(): void {
    this.lastHeardAt = this.quietSince = performance.now();
    clearTimeout(this.pending?.deadline);
    this.pending = undefined;
    if (this.degradedBy === undefined) return;
    this.degradedBy = undefined;
    this.logger.log('the LISTEN connection hears the channel again; the bus is no longer degraded');
  }

  private tick(): void {
    if (
      this.pending ||
      !this.target ||
      performance.now() - this.quietSince < this.options.intervalMs
    )
      return;
    const token = ++this.sequence;
    const deadline = setTimeout(() => this.unheard(token), this.options.timeoutMs);
    deadline.unref();
    this.pending = { token, deadline };
    this.options.sql.query(ECHO, [this.channel, ECHO_PAYLOAD]).catch(() => {
      // The database is away (the health check says so on its own): no verdict on the bus from this
      // round.
      if (this.pending?.token !== token) return;
      clearTimeout(deadline);
      this.pending = undefined;
    });
  }

  private unheard(token: number): void {
    const target = this.target;
    if (this.pending?.token !== token || !target) return;
    this.pending = undefined;
    this.quietSince = performance.now() - this.options.intervalMs; // echo again at the next tick
    const first = this.degradedBy === undefined;
    this.degradedBy = `no echo heard on the LISTEN connection within ${this.options.timeoutMs} ms`;
    if (first)
      this.logger.warn(
        `${this.degradedBy}: the bus is degraded (wake-ups wait for the fallback poll); checking ` +
          `the connection`,
      );
    void this.check(target, first);
  }

  /** Silent: half-open, replace it. Answering but deaf: a pooler; say so once and do not spin. */
  private async check(target: EchoedConnection, first: boolean): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const silent = new Promise<'silent'>((resolve) => {
      timer = setTimeout(() => resolve('silent'), this.options.timeoutMs);
    });
    const answer = target.probe().then(
      () => 'alive' as const,
      () => 'broken' as const,
    );
    const verdict = await Promise.race([answer, silent]).finally(() => clearTimeout(timer));
    if (this.target !== target) return; // replaced or stopped meanwhile
    if (verdict === 'alive') {
      if (first) {
        this.logger.warn(
          'the LISTEN connection answers queries but does not hear its own NOTIFY: is it going ' +
            'through a pooler in transaction mode? ' +
            'Give LISTEN a direct or session-mode connection; until then every wake-up waits for ' +
            'the fallback poll',
        );
      }
      return;
    }
    target.reconnect(
      verdict === 'silent'
        ? `it answered nothing for ${this.options.timeoutMs} ms (half-open?)`
        : 'its probe query failed',
    );
  }
}
