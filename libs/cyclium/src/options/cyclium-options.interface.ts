import type { Bus } from '../bus/bus.interface.js';
import type { WorkClaimsAdapter } from '../claims/work-claims-adapter.interface.js';
import type { CycliumEpisode } from '../entities/episode.entity.js';

/**
 * What a node does: `full` runs episodes; `trigger_only` creates them and leaves the running to a
 * full node (a trigger request); `disabled` fires nothing and runs nothing.
 */
export type CycliumMode = 'full' | 'trigger_only' | 'disabled';
/**
 * What recovery does with an orphaned episode: start it again (`restart`) or mark it failed
 * (`fail`).
 */
export type RecoveryPolicy = 'restart' | 'fail';

/** `CycliumOptions.recovery`: when and how the orphan sweep runs. */
export interface RecoveryOptions {
  /** Run `Recovery.sweep` after boot and then on a timer. Default `true`. */
  onBoot?: boolean;
  /**
   * Wait this long after boot before the first sweep, so the cluster can settle. Default 120 000.
   */
  settleMs?: number;
  /** A running episode whose journal is quieter than this is an orphan. Default 120 000. */
  staleAfterMs?: number;
  /** Sweep again this often after the first one; `null` sweeps at boot only. Default 60 000. */
  intervalMs?: number | null;
  /** Decides the policy per episode, ahead of the expectation's `recoveryPolicy`. */
  resolvePolicy?: (episode: CycliumEpisode) => RecoveryPolicy;
  /**
   * Running or queued episodes of an expectation (actor and expectation) that no live node of their
   * stack and env has declared for this long (and quiet for as long) end `failed` with
   * `error_class: 'not_hosted'`: the actor or the expectation was removed or renamed, and nothing
   * will ever run them. Never shorter than three node beats;
   * `null` leaves them running forever. Default 3 600 000 (an hour).
   */
  notHostedGraceMs?: number | null;
}

/** The options of `CycliumModule.forRoot`; every field has a default. */
export interface CycliumOptions {
  /**
   * This node's identity: a fixed string, or a function called on demand. Default: minted once per
   * node (hostname, pid and random hex), so a restart is a new identity.
   */
  nodeIdentity?: string | (() => string);
  /** `false` (default) makes every claim a passthrough; `'postgres'` uses the shipped adapter. */
  workClaims?: false | 'postgres' | WorkClaimsAdapter;
  /** Lease length in seconds; renewed every lease / 3. Default 120. */
  workClaimsLeaseSeconds?: number;
  /** Default `'full'`. */
  mode?: CycliumMode;
  /** The logical cluster this node belongs to; unset or empty means the single-stack default. */
  stackSlug?: string | null;
  /**
   * The world this node operates in within a shared database; unset or empty means the default env.
   */
  env?: string | null;
  /** Default `'postgres'`: the durable bus (events in cyclium_events, NOTIFY as the wake-up). */
  bus?: 'postgres' | 'local' | Bus;
  /**
   * With `bus: 'postgres'`: read the events table even without a wake-up this often. Default
   * 10 000. It covers a wake-up that never came (its sender died between commit and NOTIFY); a
   * reconnect reads at once anyway.
   */
  busPollIntervalMs?: number;
  /**
   * With `bus: 'postgres'`: the LISTEN connection's self-check. This often the node NOTIFYs an echo
   * channel of its own and expects to hear it; unheard within `busEchoTimeoutMs`, the bus is
   * degraded (readiness down, a warn log) and a LISTEN connection that answers nothing is replaced.
   * Each echo is one small non-durable commit. 0 turns it off. Default 10 000.
   */
  busEchoIntervalMs?: number;
  /** With `bus: 'postgres'`: how long an echo may take to be heard. Default 5 000. */
  busEchoTimeoutMs?: number;
  /**
   * With `bus: 'postgres'`: delete stored events older than this once every event-triggered
   * expectation's position has passed them (see `busUndispatchedMaxAgeMs`). Default 3 600 000.
   */
  busRetentionMs?: number;
  /**
   * With `bus: 'postgres'`: an event that an expectation's position has not passed (no node hosting
   * it has dispatched it) is kept this long, then deleted with a warning and counted. It bounds a
   * channel whose consumer is gone for good (an expectation removed or renamed). Default
   * 604 800 000 (a week).
   */
  busUndispatchedMaxAgeMs?: number;
  /**
   * With `bus: 'postgres'`: the most publishes this node holds in memory waiting for the database
   * (queued or being stored). One more is refused at once with `PublishQueueFullError` (a
   * `DatabaseUnavailableError`: answer 503 and retry) instead of a queue that grows while the
   * database is slow. Default 10 000.
   */
  busPublishQueueMax?: number;
  /**
   * With `bus: 'postgres'`: the largest payload `publish` takes, in bytes of its JSON (UTF-8).
   * A larger one is refused with `EventPayloadTooLargeError` before anything is queued, as is one
   * whose jsonb would print over the 4 MiB one read of the bus loads. At most 2 097 152 (2 MiB).
   * Default 1 048 576 (1 MiB).
   */
  busMaxPayloadBytes?: number;
  /**
   * With `bus: 'postgres'`: a connection URL for the bus's LISTEN connection alone, straight to
   * PostgreSQL (or through a pooler in session mode), for a host whose DataSource goes through a
   * pooler in transaction mode, where LISTEN is silently lost. The host pool's other client
   * settings (ssl, application name, timeouts) carry over; the URL says where and as whom. Unset:
   * LISTEN uses the host's DataSource settings.
   */
  listenUrl?: string;
  /**
   * `false` sends every library statement unnamed (parsed each time) instead of as a named
   * prepared statement, for a pooler in transaction mode that cannot carry them (PgBouncer before
   * 1.21, or later without `max_prepared_statements`). Costs some CPU per statement on the server.
   * Default `true`.
   */
  preparedStatements?: boolean;
  /**
   * Random delay before inserting a triggered episode, so the fastest node does not win every key.
   * Default 200.
   */
  jitterMs?: number;
  /**
   * Publish `episode.started` on the bus too (committed with the begin). Off by default: it costs
   * about a fifth of an episode's throughput and the library needs only the terminal events.
   */
  startedEvents?: boolean;
  /**
   * Feed OpenTelemetry instruments when the host registered a global MeterProvider before creating
   * the app (docs/guides/metrics-and-logs.md); false leaves them unfed even then. Default true.
   */
  metrics?: boolean;
  /**
   * Record OpenTelemetry spans (a span per episode run, one per step) when the host registered a
   * global TracerProvider before creating the app (docs/guides/tracing.md); false records none even
   * then. Trace context is stored with triggered rows either way. Default true.
   */
  tracing?: boolean;
  /** How long a drain waits for episode tasks to stop. Default 5 000. */
  episodeShutdownMs?: number;
  recovery?: RecoveryOptions;
  /**
   * How often a full node polls for deferred trigger requests without being woken (a deferring
   * node's wake-up over the bus polls at once; this covers a lost one). Default 5 000.
   */
  triggerPollIntervalMs?: number;
  /**
   * How long an idle full node goes without polling, with the `postgres` bus: once a poll finds
   * nothing due and nothing due sooner, interval ticks are skipped up to this long. Requests other
   * nodes write wake it over the bus (in their own transaction), and those it writes itself (a
   * sleep, a retry's backoff, a wait's deadline) poll when due; what is left to this poll is a
   * wake-up lost with the node that wrote it. Default 30 000, or `triggerPollIntervalMs` when
   * that is set and this is not; never below it.
   */
  triggerPollIdleIntervalMs?: number;
  triggerPollSourceStack?: string | null;
  triggerPollSourceEnv?: string | null;
  /**
   * A trigger request to run now that no full node took within this is expired; one with a due time
   * (a run for later, a retry, a sleep) never is. Default 3 600 000.
   */
  triggerRequestTtlMs?: number;
  /**
   * How long finished episodes are kept (docs/guides/retention.md); `false` keeps every row
   * forever.
   */
  retention?: RetentionOptions | false;
  /** Name of the host's TypeORM DataSource; the default one when unset. */
  dataSource?: string;
  /**
   * How long the library waits for a connection from the pool before its call fails with
   * `DatabaseUnavailableError` (nothing was sent). Raced on the client side: the pool's own
   * settings, and the host's queries, are left as they are. Default 10 000.
   */
  checkoutTimeoutMs?: number;
  /**
   * How long the library waits for the answer to one of its own statements before the call fails
   * with `DatabaseUnavailableError` and the connection is discarded. Client-side, so it also fires
   * when the server stops answering altogether; whether a timed-out write took effect is unknown.
   * Default 30 000.
   */
  queryTimeoutMs?: number;
  /**
   * How long a booting node waits for a database that is not up yet (refused, starting, shutting
   * down, read-only after a failover, a connection dropped): each step of boot that meets one tries
   * again, 1 s doubling to 10 s apart, for up to this long before boot fails. What waiting cannot
   * fix (credentials, an unknown database or host, a malformed URL) fails at once. Default 120 000.
   */
  startupWaitMs?: number;
  /** How often this node refreshes `cyclium_nodes.last_seen_at`. Default 15 000. */
  nodeBeatIntervalMs?: number;
  /**
   * Advance workflow instances on this node (hear their steps' terminal events, start the next
   * steps, reconcile after each sweep). Off, the node still starts workflows and runs their step
   * episodes; nodes with it on advance them. Default `true`.
   */
  workflowEngine?: boolean;
  /**
   * How long one output delivery may take. Past it the adapter's `signal` aborts, the attempt
   * counts as failed, and the row's lease (this plus a second) lets another node take it. Default
   * 30 000.
   */
  deliveryTimeoutMs?: number;
  /** Delivery attempts per output, across nodes; past the last one it ends `failed`. Default 8. */
  outputMaxAttempts?: number;
  /**
   * The wait before the first retry of a failed delivery; each later one waits twice the one
   * before, an hour at most. Default 5 000.
   */
  outputRetryBaseMs?: number;
  /**
   * Signs the rows that decide what runs next (checkpoints, trigger requests, workflow instances,
   * reserved bus events, node rows) with an HMAC, and refuses to act on one that does not verify:
   * its episode or request fails as `tampered`, a forged event or node row is ignored, with a warn
   * log naming the row. For several deployments sharing one database (docs/guides/integrity.md).
   * Turn it on once every node runs a release that knows it. Default: off.
   */
  integrity?: IntegrityOptions;
}

/**
 * Finished work is archived, then deleted, by one node per stack and env at a time. Archiving sets
 * an episode's `archived_at`, which frees its dedupe key (a trigger with the same key starts a new
 * episode) and drops its checkpoints; deleting removes the episode with its journal, outputs,
 * trigger requests, claim and finished workflow instances.
 */
export interface RetentionOptions {
  /**
   * Archive episodes this long after they finished (milliseconds). It is how long a dedupe key
   * stays an idempotency key, so it may not be shorter than `busUndispatchedMaxAgeMs` (an event
   * replayed after its episode was archived would run again) nor `triggerRequestTtlMs`.
   * Default: the larger of a week and those two.
   */
  archiveAfter?: number;
  /**
   * Delete archived episodes this long after they were archived (milliseconds); `null` keeps them.
   * Default 604 800 000 (a week).
   */
  deleteAfter?: number | null;
  /**
   * Rows archived or deleted per statement; a pass runs batches while they come back full, for up
   * to 5 s. Default 1 000.
   */
  batchSize?: number;
  /** How often each node tries a pass (one node per stack and env gets it). Default 60 000. */
  intervalMs?: number;
}

/**
 * The `integrity` option: the key that signs, and every key that may have signed a row still in the
 * tables.
 */
export interface IntegrityOptions {
  /** Names the key in `keys` that signs new rows. */
  keyId: string;
  /**
   * Secrets by key id, each at least 32 characters; keep a retired key here while rows it signed
   * may still be read.
   */
  keys: Record<string, string>;
}

/** The options after validation, with every default applied. */
export interface ResolvedCycliumOptions {
  nodeIdentity: string | (() => string) | null;
  workClaims: false | 'postgres' | WorkClaimsAdapter;
  workClaimsLeaseSeconds: number;
  mode: CycliumMode;
  stackSlug: string | null;
  env: string | null;
  bus: 'postgres' | 'local' | Bus;
  busPollIntervalMs: number;
  busEchoIntervalMs: number;
  busEchoTimeoutMs: number;
  busRetentionMs: number;
  busUndispatchedMaxAgeMs: number;
  busPublishQueueMax: number;
  busMaxPayloadBytes: number;
  listenUrl: string | null;
  preparedStatements: boolean;
  jitterMs: number;
  startedEvents: boolean;
  metrics: boolean;
  tracing: boolean;
  episodeShutdownMs: number;
  recovery: Required<Omit<RecoveryOptions, 'resolvePolicy'>> &
    Pick<RecoveryOptions, 'resolvePolicy'>;
  triggerPollIntervalMs: number;
  /** As given, or its default; equal to `triggerPollIntervalMs` with the `local` bus. */
  triggerPollIdleIntervalMs: number;
  triggerPollSourceStack: string | null;
  triggerPollSourceEnv: string | null;
  triggerRequestTtlMs: number;
  retention:
    (Required<Omit<RetentionOptions, 'deleteAfter'>> & { deleteAfter: number | null }) | null;
  dataSource: string | undefined;
  checkoutTimeoutMs: number;
  queryTimeoutMs: number;
  startupWaitMs: number;
  nodeBeatIntervalMs: number;
  workflowEngine: boolean;
  deliveryTimeoutMs: number;
  outputMaxAttempts: number;
  outputRetryBaseMs: number;
  integrity: IntegrityOptions | null;
}
