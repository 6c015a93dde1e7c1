import type { Logger } from '@nestjs/common';
import type { BusEvent } from '../bus/bus.interface.js';
import type { EventReceipt } from '../bus/durable-subscriptions.interface.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { readPath } from '../actors/trigger-filter.js';
import { lastEventFire } from '../episodes/event-history.js';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { databaseNow } from './event-windows.js';

const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 5_000;

/** Where the episodes and events of this node's triggers are. */
export interface HistoryScope {
  stack: string | null;
  env: string | null;
  channel: string;
}

/**
 * A cooldown this node cannot know from memory: one that began, on any node, before this node read
 * the subject's events (it booted, or its expectation was enabled again, mid-cooldown). The
 * episodes table says when the subject last fired (see lastEventFire), so the node cools down
 * exactly as the one that fired. Asked at most once per subject, and only for events within a
 * cooldown (and a debounce) of when this subscription began to read: after that, memory has seen
 * every fire.
 */
export class CooldownHistory {
  constructor(
    private readonly sql: SqlExecutor,
    private readonly scope: HistoryScope,
    private readonly logger: Logger,
    /**
     * False once this node stops: a lookup still failing then never resolves (the event stays for
     * the next reader).
     */
    private readonly active: () => boolean,
  ) {}

  /** What one subscription of `expectation` has read; a new one for each subscription. */
  coverage(expectation: RegisteredExpectation): CooldownCoverage {
    return new CooldownCoverage((event, receipt) => this.lastFire(expectation, event, receipt));
  }

  /**
   * The subject's last fire at or before `event`, within the cooldown (epoch ms), or null; retried
   * on any error.
   */
  private async lastFire(
    expectation: RegisteredExpectation,
    event: BusEvent,
    receipt: EventReceipt,
  ) {
    const { subjectKey, cooldownMs = 0, debounceMs = 0 } = expectation.options;
    const value = subjectKey ? readPath(event.payload, subjectKey) : undefined;
    const subject = subjectKey ? { path: subjectKey.split('.'), value } : undefined;
    const query = {
      ...this.scope,
      actorId: expectation.actorId,
      expectationId: expectation.id,
      subject,
      at: receipt.committedAt,
      withinMs: cooldownMs,
      debounceMs,
      eventId: event.eventId,
    };
    for (let attempt = 0, delay = RETRY_FIRST_MS; ; attempt++) {
      try {
        return await lastEventFire(this.sql, query);
      } catch (error) {
        // Not the event's fault: it waits (its position with it) until the table answers.
        if (!this.active()) return new Promise<never>(() => undefined);
        const what = `${expectation.actorId}.${expectation.id}`;
        const why = errorMessage(error);
        if (attempt === 0)
          this.logger.warn(`cooldown of ${what}, event ${event.eventId}: ${why}; retrying`);
        await new Promise((resolve) => setTimeout(resolve, delay).unref());
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
    }
  }
}

/** Asks the table about a subject's cooldown when memory cannot know it (see CooldownHistory). */
export class CooldownCoverage {
  /**
   * The database time this subscription began to read by: every event after it is in memory's view.
   */
  private since: number | undefined;
  private readonly asked = new Set<string>();

  constructor(
    private readonly lookup: (event: BusEvent, receipt: EventReceipt) => Promise<number | null>,
  ) {}

  /** Every event of the subscription passes here first. */
  read(receipt: EventReceipt): void {
    this.since ??= databaseNow(receipt);
  }

  /**
   * The table's last fire of `subject` before `event`, when it may predate this subscription; null:
   * memory knows.
   */
  ask(
    subject: string,
    event: BusEvent,
    receipt: EventReceipt,
    cooldownMs: number,
    debounceMs: number,
  ) {
    const since = this.since ?? databaseNow(receipt);
    if (receipt.committedAt >= since + cooldownMs + debounceMs) {
      this.asked.clear();
      return null;
    }
    if (this.asked.has(subject)) return null;
    this.asked.add(subject);
    return this.lookup(event, receipt);
  }
}
