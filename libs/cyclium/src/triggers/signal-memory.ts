/**
 * Signals are kept this long, for backups whose trigger fires later (a debounce ending a bit later
 * here).
 */
export const SIGNAL_MEMORY_MS = 60_000;

/**
 * How a full node handed a trigger on to the next rank: an `offer` of the row it queued, or a
 * `pass` of a trigger it holds in memory.
 */
export type Handover = 'offer' | 'pass';

interface HandedOn {
  from: number;
  until: number;
}

/**
 * What one node heard about triggers before (or while) it stood by for them, each kept for
 * SIGNAL_MEMORY_MS: which are handled, and which a full node handed on to the next rank, by
 * token, with the rank it came from. Insertion order is expiry order, so forgetting stops at the
 * first entry still young.
 */
export class SignalMemory {
  private readonly handled = new Map<string, number>();
  private readonly handedOn = {
    offer: new Map<string, HandedOn>(),
    pass: new Map<string, HandedOn>(),
  };

  /** Tokens remembered as handled now. */
  get size(): number {
    return this.handled.size;
  }

  knows(token: string, now = performance.now()): boolean {
    const until = this.handled.get(token);
    return until !== undefined && until > now;
  }

  remember(token: string, now: number): void {
    this.handled.delete(token);
    this.handled.set(token, now + SIGNAL_MEMORY_MS);
  }

  /** Remembers that rank `from` handed `token` on. */
  rememberFrom(kind: Handover, token: string, from: number, now: number): void {
    const map = this.handedOn[kind];
    map.delete(token);
    map.set(token, { from, until: now + SIGNAL_MEMORY_MS });
  }

  /**
   * True, and forgotten, when rank `rank - 1` handed `token` on this way and it is still
   * remembered.
   */
  takeFrom(kind: Handover, token: string, rank: number, now = performance.now()): boolean {
    const map = this.handedOn[kind];
    const entry = map.get(token);
    if (!entry || entry.until <= now || entry.from + 1 !== rank) return false;
    map.delete(token);
    return true;
  }

  forget(kind: Handover, token: string): void {
    this.handedOn[kind].delete(token);
  }

  /** Drops what has expired. */
  expire(now: number): void {
    for (const [token, until] of this.handled) {
      if (until > now) break;
      this.handled.delete(token);
    }
    for (const map of Object.values(this.handedOn)) {
      for (const [token, { until }] of map) {
        if (until > now) break;
        map.delete(token);
      }
    }
  }

  clear(): void {
    this.handled.clear();
    this.handedOn.offer.clear();
    this.handedOn.pass.clear();
  }
}
