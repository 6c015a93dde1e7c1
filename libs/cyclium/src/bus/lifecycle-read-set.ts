import type { Logger } from '@nestjs/common';
import { errorMessage } from '../sql/database-errors.js';
import { DECLARED_LIFECYCLE_TYPES } from './lifecycle-reads.interface.js';
import type { LocalBus } from './local-bus.js';

/**
 * Which of DECLARED_LIFECYCLE_TYPES this node's handlers take (PostgresBus's half of
 * LifecycleReads): its in-process subscribers, less those left out of the declaration (a workflow
 * engine's), and its durable consumers. Whoever stores the answer is told when it grows.
 */
export class LifecycleReadSet {
  /** Subscriptions left out of the declaration, by type. */
  private readonly undeclared = new Map<string, number>();
  private readonly listeners = new Set<() => Promise<void>>();

  constructor(
    private readonly local: LocalBus,
    private readonly durable: (type: string) => boolean,
    private readonly logger: Logger,
  ) {}

  /** Runs `add` (which subscribes a handler to `type`) and tells the listeners if it was new. */
  adding<T>(type: string, add: () => T): T {
    const before = this.declares(type);
    const added = add();
    if (!before && this.declares(type))
      this.stored().catch((error: unknown) =>
        this.logger.warn(`could not store the lifecycle events read here: ${errorMessage(error)}`),
      );
    return added;
  }

  /** Subscribes `add`'s handler without declaring it; the returned function undoes both. */
  undeclaredly(type: string, add: () => () => void): () => void {
    this.undeclared.set(type, (this.undeclared.get(type) ?? 0) + 1);
    const unsubscribe = add();
    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      unsubscribe();
      const left = (this.undeclared.get(type) ?? 1) - 1;
      if (left > 0) this.undeclared.set(type, left);
      else this.undeclared.delete(type);
    };
  }

  types(): string[] {
    return ['*', ...DECLARED_LIFECYCLE_TYPES].filter((type) => this.declares(type));
  }

  onChange(listener: () => Promise<void>): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async stored(): Promise<void> {
    await Promise.all([...this.listeners].map((listener) => listener()));
  }

  /** Whether a declared handler here takes `type` exactly (`*`: the wildcard's). */
  private declares(type: string): boolean {
    if (type !== '*' && !DECLARED_LIFECYCLE_TYPES.includes(type)) return false;
    return this.local.handlers(type) > (this.undeclared.get(type) ?? 0) || this.durable(type);
  }
}
