import { Logger } from '@nestjs/common';
import { OutageLog } from '../sql/database-errors.js';
import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import type { BusAudience } from './bus-audience.interface.js';
import { ECHO_PAYLOAD } from './bus-echo.js';
import { SpacedTrigger } from '../primitives/spaced-trigger.js';

/**
 * Wake-ups and dispatch signals share one NOTIFY per run, in a transaction of its own after the
 * events committed (a NOTIFY inside the writing transaction would serialise its commit with every
 * other notifying commit in the cluster). Not durable, so it never waits for a WAL flush. Every
 * NOTIFY costs each listening connection in the database a transaction to read it, which is why
 * there are as few as the load allows, and none at all while this node knows it is the only
 * listener (it then hears itself in-process). Payloads: '' wakes readers; 't:' wakes the readers
 * of the nodes where a handler wants one of the event types it lists (a JSON array), so a node
 * that wants none of them does not read; 'w:' and 'd:' carry signal tokens, with and without a
 * wake-up; 'q:' (when the types do not fit in a payload) wakes every reader but the named node's
 * own, for events no handler on the sender wants; 'j:' names a node that started listening; 'e:'
 * is a listener's self-check (BusEcho) and asks for nothing. An older node takes any payload it
 * does not know for a plain wake-up, which is harmless.
 */
const NOTIFY = prepared(
  'bus_notify',
  `SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1, p)) FROM ` +
    `unnest($2::text[]) p`,
);
const WAKE_AND_SIGNAL = 'w:';
const SIGNAL_ONLY = 'd:';
const JOINED = 'j:';
const WAKE_OTHERS = 'q:';
const WAKE_TYPES = 't:';
const PAYLOAD_BYTES = 7_900;

/** What a NOTIFY said: read the events table, and these triggers are handled. */
export interface Heard {
  wake: boolean;
  tokens: string[];
  /** The node that announced it started listening. */
  joined?: string;
  /** The wake-up is for every reader but this node's: nothing on it wants what woke the channel. */
  notFor?: string;
  /**
   * The event types that woke the channel: only a node with a handler for one of them reads.
   * Undefined when the sender did not say (a plain wake-up): every node reads.
   */
  types?: string[];
}

/** Hearing oneself without a NOTIFY, while nobody else listens. */
export interface LoneListener {
  audience: BusAudience;
  hear(heard: Heard): void;
}

/**
 * The NOTIFYs one node sends on its channel: whatever was asked for since the last run, in one
 * statement.
 */
export class BusNotifier {
  private readonly logger = new Logger('CycliumBus');
  private readonly outage = new OutageLog(this.logger, 'waking listeners (NOTIFY)');
  private readonly runs: SpacedTrigger;
  private pendingWake = false;
  /** Some wake-up asked for since the last run wants this node's own reader woken too. */
  private pendingReadHere = false;
  /** The event types behind the wake-ups asked for since the last run; null once one named none. */
  private pendingTypes: Set<string> | null = new Set();
  private pendingSignals: string[] = [];
  private pendingJoin: string | undefined;

  constructor(
    private readonly sql: SqlExecutor,
    private readonly channel: string,
    spacingMs: number | (() => number),
    private readonly lone?: LoneListener,
    /** This node's identity, named in a wake-up its own reader can skip. */
    private readonly identity: () => string = () => '',
  ) {
    this.runs = new SpacedTrigger(() => this.send(), spacingMs);
  }

  /**
   * `readHere` false: while this node is alone, its own reader need not read what woke it. `types`:
   * the types of the events committed, so that only the nodes that want one of them read; without
   * them, every node reads.
   */
  wake(readHere = true, types?: readonly string[]): void {
    this.pendingWake = true;
    this.pendingReadHere ||= readHere;
    if (types === undefined || types.length === 0) this.pendingTypes = null;
    else for (const type of types) this.pendingTypes?.add(type);
    this.runs.request();
  }

  signal(tokens: readonly string[]): void {
    if (tokens.length === 0) return;
    this.pendingSignals.push(...tokens);
    this.runs.request();
  }

  /**
   * Tells the channel that `identity` listens now, so a node that thought itself alone NOTIFYs
   * again.
   */
  announce(identity: string): void {
    this.pendingJoin = identity;
    this.runs.request();
  }

  /** Resolves once everything asked for so far has been sent. */
  idle(): Promise<void> {
    return this.runs.idle();
  }

  /** Reads a payload this channel carried. */
  static parse(payload: string): Heard {
    if (payload.startsWith(ECHO_PAYLOAD)) return { wake: false, tokens: [] };
    if (payload.startsWith(JOINED))
      return { wake: true, tokens: [], joined: payload.slice(JOINED.length) };
    const signals = payload.startsWith(WAKE_AND_SIGNAL) || payload.startsWith(SIGNAL_ONLY);
    if (payload.startsWith(WAKE_OTHERS))
      return { wake: true, tokens: [], notFor: payload.slice(WAKE_OTHERS.length) };
    if (payload.startsWith(WAKE_TYPES)) return { wake: true, tokens: [], types: typesIn(payload) };
    if (!signals) return { wake: true, tokens: [] };
    return {
      wake: payload.startsWith(WAKE_AND_SIGNAL),
      tokens: payload
        .slice(2)
        .split(',')
        .filter((t) => t !== ''),
    };
  }

  private async send(): Promise<void> {
    const wake = this.pendingWake;
    const tokens = this.pendingSignals;
    const join = this.pendingJoin;
    const readHere = this.pendingReadHere;
    const types = this.pendingTypes;
    this.pendingWake = false;
    this.pendingReadHere = false;
    this.pendingTypes = new Set();
    this.pendingSignals = [];
    this.pendingJoin = undefined;
    if (join === undefined && this.lone?.audience.alone) {
      if ((wake && readHere) || tokens.length > 0)
        this.lone.hear({ wake: wake && readHere, tokens });
      return;
    }
    const identity = this.identity();
    const othersOnly = wake && !readHere && identity !== '';
    const typed = wake && types !== null ? typedWake(types) : undefined;
    const payloads =
      typed !== undefined
        ? [typed, ...notifyPayloads(false, tokens)]
        : othersOnly
          ? [WAKE_OTHERS + identity, ...notifyPayloads(false, tokens)]
          : notifyPayloads(wake, tokens);
    if (join !== undefined) payloads.push(JOINED + join);
    try {
      await this.sql.query(NOTIFY([this.channel, payloads]));
      this.outage.succeeded();
    } catch (error) {
      // Listeners still read on their fallback timer: a lost wake-up costs latency, not events, and
      // a lost signal costs the waiting backups one dedupe attempt each, never an episode.
      this.outage.failed(error);
    }
  }
}

/** A wake-up naming `types`, or undefined when the list does not fit in one payload. */
function typedWake(types: ReadonlySet<string>): string | undefined {
  const payload = WAKE_TYPES + JSON.stringify([...types]);
  return Buffer.byteLength(payload, 'utf8') <= PAYLOAD_BYTES ? payload : undefined;
}

/** The types a 't:' payload lists; undefined (every node reads) when it does not parse. */
function typesIn(payload: string): string[] | undefined {
  try {
    const types: unknown = JSON.parse(payload.slice(WAKE_TYPES.length));
    return Array.isArray(types) && types.every((t) => typeof t === 'string') ? types : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One wake-up ('' when there is nothing else to say) and the tokens, in payloads NOTIFY accepts.
 */
export function notifyPayloads(wake: boolean, tokens: readonly string[]): string[] {
  if (tokens.length === 0) return wake ? [''] : [];
  const payloads: string[] = [];
  let current = '';
  for (const token of tokens) {
    if (current !== '' && current.length + token.length + 1 > PAYLOAD_BYTES) {
      payloads.push(current);
      current = '';
    }
    current = current === '' ? token : `${current},${token}`;
  }
  payloads.push(current);
  // The first payload carries the wake-up.
  return payloads.map((list, i) => (wake && i === 0 ? WAKE_AND_SIGNAL : SIGNAL_ONLY) + list);
}
