import { Logger } from '@nestjs/common';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { busChannel } from './bus-channel.js';
import type { EventScope } from './durable-events.interface.js';
import { EventLog } from './event-log.js';
import type { EventLogScope } from './event-appender.js';

/**
 * The event logs of the scopes a node writes lifecycle events to: its own, and the stack and env
 * of an episode it ran for another scope, whose nodes read only their own channel. A scope's log
 * stamps the rows with that scope's channel, stack and env, and signs them for that channel.
 */
export class ScopedLogs {
  private readonly logger = new Logger('CycliumBus');
  /** By scope (stack and env): this node's own log, or another scope's. */
  private readonly logs = new Map<string, EventLog>();

  /** This node's own log (its channel, stack and env). */
  readonly own: EventLog;

  /** `scope`: this node's own; another scope's log takes its publisher and signer. */
  constructor(
    private readonly sql: SqlExecutor,
    private readonly scope: EventLogScope,
  ) {
    this.own = new EventLog(scope);
  }

  /** The log of `scope`: this node's own when absent or when it names this node's channel. */
  of(scope: EventScope | undefined): EventLog {
    if (scope === undefined) return this.own;
    const stackSlug = scope.stackSlug || null;
    const env = scope.env || null;
    // Keyed by the scope, so an end does not hash its channel again (every lifecycle event asks).
    const key = `${stackSlug ?? ''}\u0000${env ?? ''}`;
    let log = this.logs.get(key);
    if (!log) {
      const channel = busChannel(stackSlug, env);
      log =
        channel === this.own.channel
          ? this.own
          : new EventLog({ ...this.scope, channel, stackSlug, env });
      this.logs.set(key, log);
    }
    return log;
  }

  /**
   * Wakes another scope's listeners after the commit that wrote there; a lost wake-up costs them
   * latency only (they read their channel at least every `pollIntervalMs`).
   */
  wake(log: EventLog): void {
    this.sql
      .query(`SELECT pg_notify($1, '')`, [log.channel])
      .catch((error: unknown) =>
        this.logger.warn(`could not wake channel ${log.channel}: ${errorMessage(error)}`),
      );
  }
}
