import { Inject, Injectable } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { hasDispatchSignals, type DispatchSignals } from '../bus/dispatch-signals.interface.js';
import { Bus } from '../bus/bus.interface.js';
import { notifySpacingMs } from '../bus/notify-spacing.js';
import { CYCLIUM_BUS_TRANSPORT } from '../cyclium.constants.js';
import type { DispatchResult } from '../dispatch/dispatch-result.js';
import { Dispatcher } from '../dispatch/dispatcher.service.js';
import { Peers } from '../cluster/peers.service.js';
import { SignalMemory, type Handover } from './signal-memory.js';

/**
 * How long each rank waits after the one before it for a signal that the trigger is handled: 2 s,
 * or three NOTIFY spacings in a cluster large enough for those to be longer (the first node's read
 * waits for the publisher's wake-up, and its signal for its own next NOTIFY).
 */
export const BACKUP_STEP_MS = 2_000;

export function backupStepMs(nodes: number): number {
  return Math.max(BACKUP_STEP_MS, 3 * notifySpacingMs(nodes));
}

/** What this node does with a trigger every node heard. */
export type Turn =
  /** Dispatch now: this node ranks first for it. */
  | 'first'
  /** Dispatch now: this node's backup delay passed and no node signaled it. */
  | 'backup'
  /** Leave it: another node signaled that it is handled. */
  | 'handled'
  /**
   * This node began to drain while standing by: it holds the only memory of this trigger it has, so
   * it hands it to the cluster (a deferred episode and a trigger request) instead of dropping it.
   */
  | 'handover'
  /** No ranking (a bus without dispatch signals): every node races, as the dedupe index allows. */
  | 'race';

type WaitOutcome = 'signaled' | 'timeout' | 'passed' | 'stopped';

/**
 * Results after which the trigger is someone's: an episode exists for its key, here or elsewhere.
 */
const SETTLED: ReadonlySet<DispatchResult['status']> = new Set([
  'started',
  'queued',
  'deferred',
  'duplicate',
]);

/**
 * Between a signal token and the rank of the node that queued the trigger for want of a slot: an
 * offer of that row to the next rank. A node that does not know offers takes it for a token no
 * trigger has, and ignores it.
 */
const OFFER = '>';

/**
 * Between a signal token and the rank of a node that holds the trigger in memory for want of a
 * slot (ActorSlots' waiting triggers): a pass to the next rank, which dispatches it at once if it
 * has a free slot and otherwise hands the pass on. Older nodes ignore it, as they ignore offers.
 */
const PASS = '~';

interface Waiter {
  rank: number;
  actorId: string;
  release: (outcome: WaitOutcome) => void;
}

/**
 * Makes a bus event that every node hears cost one dedupe attempt instead of one per node. The
 * nodes rank themselves per trigger (Peers): the first dispatches at once and signals it over the
 * bus; each other one waits its rank's delay and dispatches only if no signal came. A dead or
 * stalled first node therefore costs its triggers a backup's delay, never the episode, and a lost
 * signal costs one more attempt, which the dedupe index turns away. A node that drained, dropped
 * the trigger for overflow or is disabled signals nothing, so a backup takes it; a backup that
 * drains hands what it stood by for to the cluster as trigger requests (see Turn).
 *
 * A first node with no free slot queues the episode on itself, durably, as before, and its signal
 * also offers the row to the next rank: that node stands down like the others but notes the offer
 * (Dispatcher.offered), and takes the row from the full node's queue as soon as it has a free slot.
 * Each offer goes to one node, spread by the same ranking, so idle nodes do not all race for each
 * row; a node that was offered something takes any peer's queued rows of the actor while it is
 * free. A bus event that waits in the first node's memory instead (its event stays unsettled there)
 * is passed down the ranks the same way, to the first node with a free slot, which dispatches it at
 * once: nobody stands down for a pass, so the backups still cover the first node dying meanwhile.
 */
@Injectable()
export class TriggerPlacement {
  private readonly signals: DispatchSignals | undefined;
  private readonly memory = new SignalMemory();
  /**
   * Token → how to stop waiting for a slot here, for the triggers this node holds in memory (see
   * waitingHere).
   */
  private readonly held = new Map<string, () => void>();
  private readonly waiting = new Map<string, Set<Waiter>>();
  private unsubscribe: (() => void) | undefined;
  private stopped = false;

  constructor(
    @Inject(CYCLIUM_BUS_TRANSPORT) transport: Bus,
    private readonly peers: Peers,
    private readonly dispatcher: Dispatcher,
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
    for (const waiters of this.waiting.values())
      for (const waiter of waiters) waiter.release('stopped');
    this.waiting.clear();
    this.memory.clear();
    this.held.clear();
  }

  /**
   * Whether, and when, this node dispatches the trigger with `dedupeKey` for `actorId`; resolves
   * once it should.
   */
  async turn(dedupeKey: string, actorId: string): Promise<Turn> {
    if (!this.signals) return 'race';
    const rank = this.peers.rankOf(dedupeKey, actorId);
    if (rank === 0) return 'first';
    const token = tokenOf(dedupeKey);
    if (this.memory.knows(token)) {
      if (this.memory.takeFrom('offer', token, rank)) this.dispatcher.offered(actorId);
      return 'handled';
    }
    if (this.stopped) return 'handover';
    if (this.memory.takeFrom('pass', token, rank) && this.tookPass(token, rank, actorId))
      return 'backup';
    const outcome = await this.waitFor(token, rank, actorId, rank * backupStepMs(this.peers.size));
    return outcome === 'signaled' ? 'handled' : outcome === 'stopped' ? 'handover' : 'backup';
  }

  /**
   * After a dispatch: tells the other nodes when the trigger is settled, so their backups stand
   * down, and when it was queued here for want of a slot, offers it to the next rank in the same
   * NOTIFY (only then: the common case sends what it always did).
   */
  dispatched(dedupeKey: string, result: DispatchResult): void {
    if (!this.signals) return;
    const token = tokenOf(dedupeKey);
    this.held.delete(token);
    if (!SETTLED.has(result.status)) return;
    const tokens = [token];
    if (result.status === 'queued') {
      const { actorId } = result.episode;
      const rank = this.peers.rankOf(dedupeKey, actorId);
      // Before the plain token, so a NOTIFY split between payloads still carries the offer first.
      if (rank + 1 < this.peers.hostsOf(actorId)) tokens.unshift(`${token}${OFFER}${rank}`);
    }
    // Sent whatever this node thinks of its peers: the bus keeps it in-process only while it knows
    // nobody else listens.
    this.signals.signalDispatched(tokens);
  }

  /**
   * The trigger with `dedupeKey` waits in this node's memory for a slot: the next rank that has
   * one free dispatches it now (see PASS), and once a node signals it settled, `withdraw` ends the
   * wait here, so a node that passed its backlog on does not begin each of its events again.
   */
  waitingHere(dedupeKey: string, actorId: string, withdraw: () => void): void {
    if (!this.signals) return;
    const token = tokenOf(dedupeKey);
    this.held.set(token, withdraw);
    this.passOn(token, this.peers.rankOf(dedupeKey, actorId), actorId);
  }

  /** Backups standing by now, each for a trigger another node ranked first for. */
  get waitingBackups(): number {
    let count = 0;
    for (const waiters of this.waiting.values()) count += waiters.size;
    return count;
  }

  /** Signals remembered now (bounded by what arrives within SIGNAL_MEMORY_MS). */
  get remembered(): number {
    return this.memory.size;
  }

  /** Passes `token` on from `rank` to the next rank, when there is one. */
  private passOn(token: string, rank: number, actorId: string): void {
    if (rank + 1 < this.peers.hostsOf(actorId))
      this.signals?.signalDispatched([`${token}${PASS}${rank}`]);
  }

  /**
   * A pass reached this node's rank: true when it has a free slot and dispatches now; otherwise the
   * pass goes on.
   */
  private tookPass(token: string, rank: number, actorId: string): boolean {
    if (this.dispatcher.canStartNow(actorId)) return true;
    this.passOn(token, rank, actorId);
    return false;
  }

  private waitFor(token: string, rank: number, actorId: string, ms: number): Promise<WaitOutcome> {
    return new Promise((resolve) => {
      let waiters = this.waiting.get(token);
      if (!waiters) this.waiting.set(token, (waiters = new Set()));
      const waiter: Waiter = {
        rank,
        actorId,
        release: (outcome) => {
          clearTimeout(timer);
          waiters.delete(waiter);
          if (waiters.size === 0 && this.waiting.get(token) === waiters) this.waiting.delete(token);
          resolve(outcome);
        },
      };
      const timer = setTimeout(() => waiter.release('timeout'), ms);
      timer.unref();
      waiters.add(waiter);
    });
  }

  private heard(tokens: readonly string[]): void {
    const now = performance.now();
    this.memory.expire(now);
    // Offers and passes first: the plain token in the same batch releases the waiter they are for.
    for (const signal of tokens) {
      const handed = parseHandedOn(signal);
      if (!handed) continue;
      const { kind, token, from } = handed;
      const next = [...(this.waiting.get(token) ?? [])].find((waiter) => waiter.rank === from + 1);
      if (!next) this.memory.rememberFrom(kind, token, from, now);
      else if (kind === 'offer') this.dispatcher.offered(next.actorId);
      else if (this.tookPass(token, next.rank, next.actorId)) next.release('passed');
    }
    for (const token of tokens) {
      if (token.includes(OFFER) || token.includes(PASS)) continue;
      this.memory.remember(token, now);
      for (const waiter of [...(this.waiting.get(token) ?? [])]) waiter.release('signaled');
      const withdraw = this.held.get(token);
      this.held.delete(token);
      withdraw?.();
    }
  }
}

/** An offer (`token>rank`) or a pass (`token~rank`); undefined for a plain token. */
function parseHandedOn(
  signal: string,
): { kind: Handover; token: string; from: number } | undefined {
  for (const [kind, mark] of [
    ['offer', OFFER],
    ['pass', PASS],
  ] as const) {
    const at = signal.indexOf(mark);
    if (at < 0) continue;
    const from = Number(signal.slice(at + mark.length));
    return Number.isInteger(from) ? { kind, token: signal.slice(0, at), from } : undefined;
  }
  return undefined;
}

function tokenOf(dedupeKey: string): string {
  return createHash('sha256').update(dedupeKey).digest('hex').slice(0, 32);
}
