import type { SqlExecutor } from '../sql/sql-executor.js';
import type { BusAudience } from './bus-audience.interface.js';
import { BusNotifier, type Heard } from './bus-notifier.js';

/**
 * What a node says and hears on its channel besides the events themselves: wake-ups, dispatch
 * signals, and peers announcing they listen (sent by BusNotifier, heard from the LISTEN
 * connection, or in-process while the audience says this node is alone).
 */
export class BusSignals {
  private readonly notifier: BusNotifier;
  private readonly handlers = new Set<(tokens: readonly string[]) => void>();

  constructor(
    sql: SqlExecutor,
    channel: string,
    spacingMs: number | (() => number),
    /** This node's name, as stamped on its events ('unknown' without one). */
    private readonly identity: () => string,
    private readonly audience: BusAudience | undefined,
    /** This node's own name, when it has one (PostgresBusOptions.publisher). */
    publisher: (() => string) | undefined,
    /** Wakes this node's own reader. */
    private readonly wakeReader: () => void,
    /** Whether a handler on this node takes events of `type`. */
    private readonly wants: (type: string) => boolean,
  ) {
    const lone = this.audience
      ? { audience: this.audience, hear: (heard: Heard) => this.hear(heard) }
      : undefined;
    // Only a node with a name of its own can be told apart from its peers in a wake-up.
    this.notifier = new BusNotifier(sql, channel, spacingMs, lone, publisher ?? (() => ''));
  }

  /** Tells the channel this node listens (see PostgresBus.announceListening). */
  announceListening(): void {
    if (this.audience) this.notifier.announce(this.identity());
  }

  /**
   * Wakes the listeners of the channel that want one of `types` (every one without them); this
   * node's own reader only when `readHere`.
   */
  wake(readHere: boolean, types?: readonly string[]): void {
    this.notifier.wake(readHere, types);
  }

  signal(tokens: readonly string[]): void {
    this.notifier.signal(tokens);
  }

  onDispatched(handler: (tokens: readonly string[]) => void): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }

  /** What a NOTIFY (or this node itself, while alone) said. */
  hear({ wake, tokens, joined, notFor, types }: Heard): void {
    if (joined !== undefined && joined !== this.identity() && this.audience) {
      const wasAlone = this.audience.alone;
      this.audience.joined(joined);
      // What this node committed unannounced since the newcomer took its cursor: it reads that now.
      if (wasAlone) this.notifier.wake();
    }
    // A wake-up for events none of this node's handlers wants: the others read, it need not. What
    // it skips it reads with its next read (another wake-up, or the fallback timer).
    const wanted = types === undefined || types.some((type) => this.wants(type));
    if (wake && notFor !== this.identity() && wanted) this.wakeReader();
    if (tokens.length === 0) return;
    for (const handler of this.handlers) handler(tokens);
  }

  /** Resolves once every wake-up and signal asked for so far has been sent. */
  idle(): Promise<void> {
    return this.notifier.idle();
  }
}
