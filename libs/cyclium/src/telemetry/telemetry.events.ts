/** Every event carries the identity of the node that emitted it. */
export interface CycliumEventBase {
  ownerNode: string;
}

export interface WorkClaimEvent extends CycliumEventBase {
  dedupeKey: string;
  fence: number | null;
  durationMs: number;
  /**
   * `work_claims.renewed` only: how late the renewal was sent against its schedule (a third of the
   * lease after the previous renewal or the acquire), 0 when on time or early. Set only while
   * someone listens.
   */
  lagMs?: number;
}

export interface EpisodeEvent extends CycliumEventBase {
  episodeId: string;
  actorId: string;
  expectationId: string;
  [detail: string]: unknown;
}

/** The catalogue: event name → metadata. Channels are named `cyclium:<area>:<event>`. */
export interface CycliumEventMap {
  'work_claims.acquired': WorkClaimEvent;
  'work_claims.steal': WorkClaimEvent;
  'work_claims.busy': WorkClaimEvent;
  'work_claims.renewed': WorkClaimEvent;
  'work_claims.renew_failed': WorkClaimEvent;
  'work_claims.completed': WorkClaimEvent;
  'work_claims.failed': WorkClaimEvent;
  'episode.started': EpisodeEvent;
  'episode.resumed': EpisodeEvent;
  'episode.completed': EpisodeEvent;
  'episode.failed': EpisodeEvent;
  'episode.canceled': EpisodeEvent;
  'episode.interrupted': EpisodeEvent;
  'episode.aborted': EpisodeEvent;
  /**
   * An attempt failed with attempts left (the expectation's `retry`): the episode waits `delayMs`;
   * `attempt` is the one that failed.
   */
  'episode.retrying': EpisodeEvent & { errorClass: string; attempt: number; delayMs: number };
  /** `ep.sleep` gave up the run until its wake-up time; `name` is the sleep's. */
  'episode.sleeping': EpisodeEvent & { name: string; delayMs: number };
  /**
   * A wait (signal, event, children) gave up the run until it is satisfied or its deadline (ISO,
   * null for none) passes; `name` is the wait's step name.
   */
  'episode.waiting': EpisodeEvent & {
    name: string;
    kind: 'signal' | 'event' | 'children';
    deadline: string | null;
  };
  /**
   * A wait of this node's run ended and was journaled: `received` (a signal or an event), `done`
   * (every child ended) or `timed_out`.
   */
  'episode.wait_ended': EpisodeEvent & {
    name: string;
    kind: 'signal' | 'event' | 'children';
    outcome: 'received' | 'done' | 'timed_out';
  };
  /**
   * A step of this node's run returned and its write came back; `durationMs` is the step function's
   * time, as journaled.
   */
  'episode.step': CycliumEventBase & { actorId: string; expectationId: string; durationMs: number };
  /**
   * An episode triggered by a bus event began on this node; `latencyMs` runs from the event's
   * `publishedAt` (the publisher's wall clock) to the begin's commit (this node's).
   */
  'episode.triggered': CycliumEventBase & {
    actorId: string;
    expectationId: string;
    eventType: string;
    latencyMs: number;
  };
  /** Events this node stored on a durable bus and announced after commit (PostgresBus only). */
  'bus.published': CycliumEventBase & { channel: string; count: number };
  /** Rows this node read from the events table (PostgresBus only). */
  'bus.read': CycliumEventBase & { channel: string; count: number };
  'recovery.sweep': CycliumEventBase & {
    restarted: number;
    deferred: number;
    failed: number;
    /**
     * Episodes of an expectation no live node declared for `recovery.notHostedGraceMs`, failed as
     * `not_hosted`.
     */
    notHosted: number;
    skipped: number;
    /**
     * Why each skipped candidate was left: `busy` (a live claim), `taken` (another node),
     * `not_hosted`, `error`.
     */
    skippedFor: Partial<Record<'busy' | 'taken' | 'not_hosted' | 'error', number>>;
  };
  'trigger_requests.deferred': CycliumEventBase & { requestId: string; episodeId: string };
  'trigger_requests.dispatched': CycliumEventBase & { requestId: string; episodeId: string };
  'trigger_requests.expired': CycliumEventBase & { count: number };
  'recovery.reconcile': CycliumEventBase & { replayed: number; skipped: number };
  'workflow.started': CycliumEventBase & { instanceId: string; workflowId: string };
  'workflow.finished': CycliumEventBase & {
    instanceId: string;
    workflowId: string;
    status: string;
    error: string | null;
  };
  'drain.completed': CycliumEventBase & { stamped: number; killed: number };
  'node.registered': CycliumEventBase & { stack: string | null; env: string | null; mode: string };
}

/** The name of a telemetry event Cyclium emits (a key of `CycliumEventMap`). */
export type CycliumEventName = keyof CycliumEventMap;

/** `work_claims.acquired` → `cyclium:work_claims:acquired`. */
export function channelName(event: CycliumEventName): string {
  return `cyclium:${event.replace('.', ':')}`;
}
