import { Inject, Injectable } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { hasDispatchSignals, type DispatchSignals } from '../bus/dispatch-signals.interface.js';
import { Bus } from '../bus/bus.interface.js';
import { notifySpacingMs } from '../bus/notify-spacing.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import type { DispatchResult } from '../dispatch/dispatch-result.js';
import { Peers } from '../identity/peers.service.js';

/**
 * How long each rank waits after the one before it for a signal that the trigger is handled: 2 s,
 * or three NOTIFY spacings in a cluster large enough for those to be longer (the first node's read
 * waits for the publisher's wake-up, and its signal for its own next NOTIFY).
 */
export const BACKUP_STEP_MS = 2_000;

export function backupStepMs(nodes: number): number {
  return Math.max(BACKUP_STEP_MS, 3 * notifySpacingMs(nodes));
}
/** Signals are kept this long, for backups whose trigger fires later (a debounce ending a bit later here). */
const SIGNAL_MEMORY_MS = 60_000;

/** What this node does with a trigger every node heard. */
export type Turn =
  /** Dispatch now: this node ranks first for it. */
  | 'first'
  /** Dispatch now: this node's backup delay passed and no node signaled it. */
  | 'backup'
  /** Leave it: another node signaled that it is handled. */
  | 'handled'
  /**
   * This node began to drain while standing by: it holds the only memory of this trigger it has,
   * so it hands it to the cluster (a deferred episode and a trigger request) instead of dropping it.
   */
  | 'handover'
  /** No ranking (a bus without dispatch signals): every node races, as the dedupe index allows. */
  | 'race';

type WaitOutcome = 'signaled' | 'timeout' | 'stopped';

/** Results after which the trigger is someone's: an episode exists for its key, here or elsewhere. */
const SETTLED: ReadonlySet<DispatchResult['status']> = new Set(['started', 'queued', 'deferred', 'duplicate']);

/**
 * Makes a bus event that every node hears cost one dedupe attempt instead of one per node. The
 * nodes rank themselves per trigger (Peers): the first dispatches at once and signals it over the
 * bus; each other one waits its rank's delay and dispatches only if no signal came. A dead or
 * stalled first node therefore costs its triggers a backup's delay, never the episode, and a lost
 * signal costs one more attempt, which the dedupe index turns away. A node that drained, dropped
 * the trigger for overflow or is disabled signals nothing, so a backup takes it; a backup that
 * drains hands what it stood by for to the cluster as trigger requests (see Turn).
 */
@Injectable()
export class TriggerPlacement {
  private readonly signals: DispatchSignals | undefined;
  /** Token → when this node stops remembering its signal. Insertion order is expiry order. */
  private readonly signaled = new Map<string, number>();
  private readonly waiting = new Map<string, Set<(outcome: WaitOutcome) => void>>();
  private unsubscribe: (() => void) | undefined;
  private stopped = false;

  constructor(
    @Inject(CYCLIUM_BUS_TRANSPORT) transport: Bus,
    private readonly peers: Peers,
  ) {
    this.signals = hasDispatchSignals(transport) ? transport : undefined;
  }

  start(): void {
    this.stopped = false;
    this.unsubscribe ??= this.signals?.onDispatched((tokens) => this.heard(tokens));
  }

  /** Releases every waiting backup with 'handover'. */
  stop(): void {
    this.stopped = true;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    for (const wakers of this.waiting.values()) for (const release of wakers) release('stopped');
    this.waiting.clear();
    this.signaled.clear();
  }

  /** Whether, and when, this node dispatches the trigger with `dedupeKey` for `actorId`; resolves once it should. */
  async turn(dedupeKey: string, actorId: string): Promise<Turn> {
    if (!this.signals) return 'race';
    const rank = this.peers.rankOf(dedupeKey, actorId);
    if (rank === 0) return 'first';
    const token = tokenOf(dedupeKey);
    if (this.knows(token)) return 'handled';
    if (this.stopped) return 'handover';
    const outcome = await this.waitFor(token, rank * backupStepMs(this.peers.size));
    return outcome === 'signaled' ? 'handled' : outcome === 'stopped' ? 'handover' : 'backup';
  }

  /** After a dispatch: tells the other nodes when the trigger is settled, so their backups stand down. */
  dispatched(dedupeKey: string, result: DispatchResult): void {
    // Sent whatever this node thinks of its peers: the bus keeps it in-process only while it knows nobody else listens.
    if (this.signals && SETTLED.has(result.status)) this.signals.signalDispatched([tokenOf(dedupeKey)]);
  }

  /** Backups standing by now, each for a trigger another node ranked first for. */
  get waitingBackups(): number {
    let count = 0;
    for (const wakers of this.waiting.values()) count += wakers.size;
    return count;
  }

  /** Signals remembered now (bounded by what arrives within SIGNAL_MEMORY_MS). */
  get remembered(): number {
    return this.signaled.size;
  }

  private knows(token: string): boolean {
    const until = this.signaled.get(token);
    return until !== undefined && until > performance.now();
  }

  private waitFor(token: string, ms: number): Promise<WaitOutcome> {
    return new Promise((resolve) => {
      let wakers = this.waiting.get(token);
      if (!wakers) this.waiting.set(token, (wakers = new Set()));
      const done = (outcome: WaitOutcome) => {
        clearTimeout(timer);
        wakers.delete(done);
        if (wakers.size === 0 && this.waiting.get(token) === wakers) this.waiting.delete(token);
        resolve(outcome);
      };
      const timer = setTimeout(() => done('timeout'), ms);
      timer.unref();
      wakers.add(done);
    });
  }

  private heard(tokens: readonly string[]): void {
    const now = performance.now();
    for (const [token, until] of this.signaled) {
      if (until > now) break;
      this.signaled.delete(token);
    }
    for (const token of tokens) {
      this.signaled.delete(token);
      this.signaled.set(token, now + SIGNAL_MEMORY_MS);
      for (const release of [...(this.waiting.get(token) ?? [])]) release('signaled');
    }
  }
}

function tokenOf(dedupeKey: string): string {
  return createHash('sha256').update(dedupeKey).digest('hex').slice(0, 32);
}
