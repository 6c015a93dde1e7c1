import type { Logger } from '@nestjs/common';
import type { EventOutbox } from '../bus/event-outbox.service.js';
import type { DurableHandler } from '../bus/durable-subscriptions.interface.js';
import type { Mode } from '../dispatch/mode.service.js';

interface Subscription {
  readonly actorId: string;
  readonly consumer: string;
  readonly type: string;
  /**
   * A handler for each subscription; `live` is false once that subscription ended (a pause or a
   * stop).
   */
  readonly handler: (live: () => boolean) => DurableHandler;
  off?: () => void;
  /** The current subscription's token: a handler of an earlier one sees itself ended. */
  current?: object;
  /** Unsubscribed by a change to `disabled` (not by a stop). */
  paused?: boolean;
}

/**
 * The durable consumers of this node's event-triggered expectations, each subscribed only while its
 * actor is not `disabled` here. A disabled actor reads nothing and holds nothing: its position
 * stays where its settled events left it, so the events published meanwhile wait in the table (up
 * to `busUndispatchedMaxAgeMs`), and once the actor is enabled again its consumer catches up from
 * that position and dispatches them, as a node that boots does. Full nodes of the cluster that host
 * the actor dispatch them meanwhile, and move the shared position past them.
 */
export class EventSubscriptions {
  private readonly subscriptions: Subscription[] = [];
  private readonly following: Array<() => void> = [];

  constructor(
    private readonly events: EventOutbox,
    private readonly mode: Mode,
    private readonly logger: Logger,
  ) {}

  get size(): number {
    return this.subscriptions.length;
  }

  add(
    actorId: string,
    consumer: string,
    type: string,
    handler: (live: () => boolean) => DurableHandler,
  ): void {
    this.subscriptions.push({ actorId, consumer, type, handler });
  }

  /** Subscribes what is not disabled, and follows every change of mode from now on. */
  start(): void {
    if (this.following.length === 0) {
      this.following.push(
        this.mode.onChange(() => this.follow()),
        this.mode.onActorChange(() => this.follow()),
      );
    }
    this.follow();
  }

  /** Unsubscribes everything: the events not yet settled stay for the bus's next reader. */
  stop(): void {
    this.following.splice(0).forEach((off) => off());
    for (const subscription of this.subscriptions) {
      this.unsubscribe(subscription);
      subscription.paused = false;
    }
  }

  private follow(): void {
    const paused: string[] = [];
    const resumed: string[] = [];
    for (const subscription of this.subscriptions) {
      const { actorId, consumer, type, handler } = subscription;
      const wanted = this.mode.of(actorId) !== 'disabled';
      if (wanted && !subscription.off) {
        const token = {};
        subscription.current = token;
        subscription.off = this.events.subscribeDurable(
          consumer,
          type,
          handler(() => subscription.current === token),
        );
        if (subscription.paused) resumed.push(consumer);
        subscription.paused = false;
      } else if (!wanted && !subscription.paused) {
        this.unsubscribe(subscription);
        subscription.paused = true;
        paused.push(consumer);
      }
    }
    if (paused.length > 0)
      this.logger.log(`disabled here: ${paused.join(', ')} read no events until enabled`);
    if (resumed.length > 0)
      this.logger.log(`enabled again: ${resumed.join(', ')} catch up from stored positions`);
  }

  private unsubscribe(subscription: Subscription): void {
    subscription.off?.();
    subscription.off = undefined;
    subscription.current = undefined;
  }
}
