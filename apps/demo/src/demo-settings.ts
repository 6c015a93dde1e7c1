import type { CycliumOptions } from '@cyclium/nestjs';

/**
 * The demo runs with claims on and short timings, so crashes, drains and takeovers are visible
 * within a minute. The launcher and the cluster tests tune them through the environment:
 *
 *   DEMO_LEASE_SECONDS         claim lease (default 10)
 *   DEMO_JITTER_MS             random delay before inserting a triggered episode (default 200)
 *   DEMO_SHUTDOWN_MS           how long a SIGTERM drain waits for running episodes (default 5000)
 *   DEMO_SETTLE_MS             delay after boot before the first recovery sweep (default 10000)
 *   DEMO_STALE_AFTER_MS        journal silence after which a running episode is an orphan (default 20000)
 *   DEMO_RECOVERY_INTERVAL_MS  period of the recovery sweep after the first one (default 5000)
 *   DEMO_NODE_BEAT_MS          how often the node refreshes its cyclium_nodes row (default 15000)
 *   DEMO_TRIGGER_POLL_MS       how often a full node polls for deferred trigger requests (library default 5000)
 *   DEMO_TRIGGER_IDLE_POLL_MS  how long an idle full node goes without polling (library default 30000, or DEMO_TRIGGER_POLL_MS when that is set)
 *   DEMO_TRIGGER_TTL_MS        how long a trigger request may stay pending (default 3600000)
 *   DEMO_ADVISOR_EVERY         resource_advisor's interval (default 1m; read in resource-advisor.actor.ts)
 *   DEMO_ADVISOR_CATCH_UP      what resource_advisor does with the minutes a whole-cluster stop missed: none (default), last or all
 *   DEMO_REBALANCER_SLOTS      resource_rebalancer's maxConcurrentEpisodes (default 10; read in resource-rebalancer.actor.ts)
 *   DEMO_DROP_ACTORS           actor ids this node does not host, comma-separated (see actors/dropped-declarations.ts)
 *   DEMO_DROP_EXPECTATIONS     `actor.expectation` entries this node leaves out, as another release would (the same)
 *   DEMO_ACTORS                the actors this node hosts, comma-separated ids (default all; read in app.module.ts)
 *   DEMO_WORK_CLAIMS           'off' runs with work claims off (the library's default), else on PostgreSQL
 *   DEMO_NOT_HOSTED_GRACE_MS   recovery.notHostedGraceMs (library default 3600000)
 *   DEMO_WORKFLOW_ENGINE       'off' runs workflow steps here but leaves advancing workflows to other nodes
 *   DEMO_BUS_QUEUE_MAX         publishes held in memory before POST /events answers 503 (library default 10000)
 *   DEMO_BUS_MAX_PAYLOAD_BYTES largest event payload, in bytes of JSON (library default 1048576)
 *   DEMO_CHECKOUT_TIMEOUT_MS   how long the library waits for a pool connection (library default 10000)
 *   DEMO_QUERY_TIMEOUT_MS      how long the library waits for one statement's answer (library default 30000)
 *   DEMO_STARTUP_WAIT_MS       how long a booting node waits for a database that is not up (library default 120000)
 *   DEMO_INTEGRITY_KEY         turns the `integrity` option on with this secret (32 characters at least) as key `demo`
 *   DEMO_BUS_RETENTION_MS      keep dispatched bus events this long (library default 3600000)
 *   DEMO_BUS_UNDISPATCHED_MS   keep undispatched bus events this long (library default 604800000)
 *   DEMO_ARCHIVE_AFTER_MS      retention.archiveAfter (library default: a week, or the two windows above if longer)
 *   DEMO_DELETE_AFTER_MS       retention.deleteAfter (library default 604800000)
 *   DEMO_RETENTION_EVERY_MS    retention.intervalMs (library default 60000)
 *   DEMO_RETENTION_BATCH       retention.batchSize (library default 1000)
 *
 * (DEMO_DB_POOL, the TypeORM pool size, is read in app.module.ts.)
 */
export function demoCycliumSettings(env: NodeJS.ProcessEnv): CycliumOptions {
  return {
    workClaims: env.DEMO_WORK_CLAIMS === 'off' ? false : 'postgres',
    workClaimsLeaseSeconds: Number(env.DEMO_LEASE_SECONDS ?? 10),
    jitterMs: Number(env.DEMO_JITTER_MS ?? 200),
    episodeShutdownMs: Number(env.DEMO_SHUTDOWN_MS ?? 5000),
    nodeBeatIntervalMs: Number(env.DEMO_NODE_BEAT_MS ?? 15000),
    // Unset, the library's ticks (5 s) and idle polls (30 s); set, this interval and no idling,
    // unless DEMO_TRIGGER_IDLE_POLL_MS says otherwise.
    ...(env.DEMO_TRIGGER_POLL_MS
      ? { triggerPollIntervalMs: Number(env.DEMO_TRIGGER_POLL_MS) }
      : {}),
    ...(env.DEMO_TRIGGER_IDLE_POLL_MS
      ? { triggerPollIdleIntervalMs: Number(env.DEMO_TRIGGER_IDLE_POLL_MS) }
      : {}),
    triggerRequestTtlMs: Number(env.DEMO_TRIGGER_TTL_MS ?? 3_600_000),
    workflowEngine: env.DEMO_WORKFLOW_ENGINE !== 'off',
    // Unset leaves the library's defaults.
    ...(env.DEMO_BUS_QUEUE_MAX ? { busPublishQueueMax: Number(env.DEMO_BUS_QUEUE_MAX) } : {}),
    ...(env.DEMO_BUS_MAX_PAYLOAD_BYTES
      ? { busMaxPayloadBytes: Number(env.DEMO_BUS_MAX_PAYLOAD_BYTES) }
      : {}),
    ...(env.DEMO_CHECKOUT_TIMEOUT_MS
      ? { checkoutTimeoutMs: Number(env.DEMO_CHECKOUT_TIMEOUT_MS) }
      : {}),
    ...(env.DEMO_QUERY_TIMEOUT_MS ? { queryTimeoutMs: Number(env.DEMO_QUERY_TIMEOUT_MS) } : {}),
    ...(env.DEMO_STARTUP_WAIT_MS ? { startupWaitMs: Number(env.DEMO_STARTUP_WAIT_MS) } : {}),
    ...(env.DEMO_INTEGRITY_KEY
      ? { integrity: { keyId: 'demo', keys: { demo: env.DEMO_INTEGRITY_KEY } } }
      : {}),
    ...(env.DEMO_BUS_RETENTION_MS ? { busRetentionMs: Number(env.DEMO_BUS_RETENTION_MS) } : {}),
    ...(env.DEMO_BUS_UNDISPATCHED_MS
      ? { busUndispatchedMaxAgeMs: Number(env.DEMO_BUS_UNDISPATCHED_MS) }
      : {}),
    retention: {
      ...(env.DEMO_ARCHIVE_AFTER_MS ? { archiveAfter: Number(env.DEMO_ARCHIVE_AFTER_MS) } : {}),
      ...(env.DEMO_DELETE_AFTER_MS ? { deleteAfter: Number(env.DEMO_DELETE_AFTER_MS) } : {}),
      ...(env.DEMO_RETENTION_EVERY_MS ? { intervalMs: Number(env.DEMO_RETENTION_EVERY_MS) } : {}),
      ...(env.DEMO_RETENTION_BATCH ? { batchSize: Number(env.DEMO_RETENTION_BATCH) } : {}),
    },
    recovery: {
      settleMs: Number(env.DEMO_SETTLE_MS ?? 10000),
      staleAfterMs: Number(env.DEMO_STALE_AFTER_MS ?? 20000),
      intervalMs: Number(env.DEMO_RECOVERY_INTERVAL_MS ?? 5000),
      ...(env.DEMO_NOT_HOSTED_GRACE_MS
        ? { notHostedGraceMs: Number(env.DEMO_NOT_HOSTED_GRACE_MS) }
        : {}),
    },
  };
}
