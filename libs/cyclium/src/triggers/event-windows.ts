import type { BusEvent } from '../bus/bus.interface.js';
import type { EventReceipt } from '../bus/durable-subscriptions.interface.js';

/**
 * Fires the trigger of `event`; resolves true once it is settled (an episode exists, or need not).
 */
export type Fire = (event: BusEvent, receipt: EventReceipt) => Promise<boolean>;

interface Settle {
  resolve: () => void;
  reject: (error: unknown) => void;
}

interface Window {
  last: BusEvent;
  receipt: EventReceipt;
  timer: NodeJS.Timeout;
  /** The settling of every event the window took in: they are dispatched by its last one. */
  settles: Settle[];
  fire: Fire;
  debounceMs: number;
  cooldownMs: number;
  readThrough?: () => Promise<void>;
}

/**
 * The table's last fire of the subject at or before the event, when it may predate this node's
 * reading (CooldownCoverage.ask); null when memory already knows.
 */
export type AskHistory = (
  subject: string,
  event: BusEvent,
  receipt: EventReceipt,
) => Promise<number | null> | null;

/** How one expectation groups and spaces its subjects' events. */
export interface WindowRules {
  debounceMs: number;
  cooldownMs: number;
  /** Where a cooldown that began before this node read the subject is found. */
  history?: AskHistory;
  /**
   * Resolves once this node has read every event committed before the call
   * (DurableSubscriptions.readThrough).
   */
  readThrough?: () => Promise<void>;
}

/** The database clock now, as seen from a receipt: its age when read plus the time since. */
export function databaseNow(receipt: EventReceipt): number {
  return receipt.committedAt + receipt.ageMs + (performance.now() - receipt.readAt);
}

/**
 * Debounce (trailing edge) and cooldown per subject, decided from the events' committed times on
 * the database clock rather than from when this node read them: a node that replays the events
 * after a restart, or boots in the middle of a window, groups them as the live node did, and both
 * fire the same last event (whose dedupe key lets one episode through). An event committed less
 * than `debounceMs` after the window's last one joins it; the window fires at its last event's
 * committed time + `debounceMs`; a subject cools down from that moment for `cooldownMs`. A
 * cooldown that began before this node read the subject (it booted, or was enabled, mid-cooldown)
 * is asked of the table once (`history`), and the subject's events wait for the answer, in order.
 */
export class EventWindows {
  private readonly windows = new Map<string, Window>();
  /**
   * Per subject, the admission its next event waits for (a history lookup, and the events queued
   * behind it).
   */
  private readonly gates = new Map<string, Promise<void>>();
  /** Per subject, until when (database clock) its events are ignored. */
  private readonly coolUntil = new Map<string, number>();
  private readonly coolTimers = new Set<NodeJS.Timeout>();

  /** Resolves once the trigger that covers `event` has settled; stays pending if it never does. */
  admit(
    subject: string,
    event: BusEvent,
    receipt: EventReceipt,
    rules: WindowRules,
    fire: Fire,
  ): Promise<void> {
    const { cooldownMs, history } = rules;
    const admit = () => this.admitNow(subject, event, receipt, rules, fire);
    const gate = this.gates.get(subject);
    if (gate) return this.behind(subject, gate, admit);
    const at = receipt.committedAt;
    const cooled = (this.coolUntil.get(subject) ?? -Infinity) > at;
    const asking =
      cooldownMs > 0 && !cooled && !this.windows.has(subject)
        ? history?.(subject, event, receipt)
        : null;
    if (!asking) return admit();
    const known = asking.then((firedAt) => {
      if (firedAt !== null && at < firedAt + cooldownMs)
        this.coolDown(subject, firedAt + cooldownMs, receipt);
    });
    return this.behind(subject, known, admit);
  }

  /**
   * Admits once `gate` has passed, after every event of the subject queued before; the next ones
   * queue behind.
   */
  private behind(subject: string, gate: Promise<void>, admit: () => Promise<void>): Promise<void> {
    let settling: Promise<void> = Promise.resolve();
    const admitted = gate.then(() => {
      settling = admit();
    });
    this.gates.set(subject, admitted);
    const passed = () => {
      if (this.gates.get(subject) === admitted) this.gates.delete(subject);
    };
    admitted.then(passed, passed);
    return admitted.then(() => settling);
  }

  private admitNow(
    subject: string,
    event: BusEvent,
    receipt: EventReceipt,
    rules: WindowRules,
    fire: Fire,
  ) {
    const { debounceMs, cooldownMs, readThrough } = rules;
    const at = receipt.committedAt;
    const open = this.windows.get(subject);
    // Read late (a replay, or a slow read): the window had already closed by the committed clock.
    if (open && at - open.receipt.committedAt >= open.debounceMs) this.close(subject, open);
    const until = this.coolUntil.get(subject);
    if (until !== undefined && at < until) return Promise.resolve();
    if (debounceMs <= 0) return this.run(subject, event, receipt, at, cooldownMs, fire);
    return new Promise<void>((resolve, reject) => {
      const window = this.windows.get(subject);
      if (window) {
        clearTimeout(window.timer);
        window.last = event;
        window.receipt = receipt;
        // It fires as its last event's reader would: an event read before a pause fires nothing
        // now.
        window.fire = fire;
        window.settles.push({ resolve, reject });
      }
      const current: Window = window ?? {
        last: event,
        receipt,
        timer: undefined as unknown as NodeJS.Timeout,
        settles: [{ resolve, reject }],
        fire,
        debounceMs,
        cooldownMs,
        readThrough,
      };
      current.timer = setTimeout(
        () => this.due(subject, current),
        Math.max(0, at + debounceMs - databaseNow(receipt)),
      );
      current.timer.unref();
      this.windows.set(subject, current);
    });
  }

  /**
   * Drops the open windows and cooldowns of the subjects that start with `prefix` (every one
   * without it); their events stay unsettled, for the next reader.
   */
  clear(prefix?: string): void {
    const dropped = (subject: string) => prefix === undefined || subject.startsWith(prefix);
    for (const subject of [...this.gates.keys()]) if (dropped(subject)) this.gates.delete(subject);
    for (const [subject, window] of [...this.windows]) {
      if (!dropped(subject)) continue;
      clearTimeout(window.timer);
      this.windows.delete(subject);
    }
    for (const subject of [...this.coolUntil.keys()])
      if (dropped(subject)) this.coolUntil.delete(subject);
    if (prefix !== undefined) return;
    for (const timer of this.coolTimers) clearTimeout(timer);
    this.coolTimers.clear();
  }

  /** Subjects cooling down now (bounded by the subjects seen within `cooldownMs`). */
  get coolingDown(): number {
    return this.coolUntil.size;
  }

  /**
   * The window's time has come by the database clock, yet this node may not have read everything
   * committed before it (reads lag after an outage, under load, while a LISTEN reconnects): an
   * event of the subject it has not read would make it fire one its peers see superseded. So the
   * window closes after a read that began now, unless that read added to it (a new timer then
   * runs) or closed it.
   */
  private due(subject: string, window: Window): void {
    if (!window.readThrough) return this.close(subject, window);
    const last = window.last;
    const closeIfUnchanged = () => {
      if (this.windows.get(subject) === window && window.last === last) this.close(subject, window);
    };
    window.readThrough().then(closeIfUnchanged, closeIfUnchanged);
  }

  private close(subject: string, window: Window): void {
    clearTimeout(window.timer);
    if (this.windows.get(subject) === window) this.windows.delete(subject);
    const firedAt = window.receipt.committedAt + window.debounceMs;
    // The outcome reaches the window's events through their settles; nothing is left to reject
    // here.
    this.run(subject, window.last, window.receipt, firedAt, window.cooldownMs, window.fire).then(
      () => window.settles.forEach((s) => s.resolve()),
      (error: unknown) => window.settles.forEach((s) => s.reject(error)),
    );
  }

  /**
   * Resolves once the trigger settled, rejects for a reason of the event's own, stays pending
   * otherwise (its consumer's position then stays before the event). A trigger that fired nothing
   * (this node drained, or the actor is disabled here) began no cooldown.
   */
  private run(
    subject: string,
    event: BusEvent,
    receipt: EventReceipt,
    firedAt: number,
    cooldownMs: number,
    fire: Fire,
  ): Promise<void> {
    const until = firedAt + cooldownMs;
    if (cooldownMs > 0) this.coolDown(subject, until, receipt);
    return fire(event, receipt).then((settled) => {
      if (settled) return undefined;
      if (cooldownMs > 0 && this.coolUntil.get(subject) === until) this.coolUntil.delete(subject);
      // A promise of its own: once the consumer that waits on it is gone, nothing holds either.
      return new Promise<void>(() => undefined);
    });
  }

  private coolDown(subject: string, until: number, receipt: EventReceipt): void {
    this.coolUntil.set(subject, until);
    const timer = setTimeout(
      () => {
        this.coolTimers.delete(timer);
        if (this.coolUntil.get(subject) === until) this.coolUntil.delete(subject);
      },
      Math.max(0, until - databaseNow(receipt)),
    );
    timer.unref();
    this.coolTimers.add(timer);
  }
}
