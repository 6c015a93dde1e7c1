import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import { liveClaimCounts } from '../claims/claim-sql.js';
import { SharedRead } from '../primitives/shared-read.js';
import { busChannel } from '../bus/bus-channel.js';
import { STORED_POSITIONS, type StoredPosition } from '../bus/bus-positions.js';
import type { CycliumMode, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { LastSweep } from '../recovery/recovery-sweep.interface.js';

/** How recently a node beat: see ClusterNode.health. */
export type NodeHealth = 'live' | 'suspect' | 'stale';

/** One node as the cluster status reads it from `cyclium_nodes`. */
export interface ClusterNode {
  identity: string;
  stack: string | null;
  env: string | null;
  mode: CycliumMode;
  hostname: string;
  pid: number;
  version: string;
  startedAt: Date;
  lastSeenAt: Date;
  /**
   * Beat within `2 × nodeBeatIntervalMs` by the database's clock; a node killed outright turns
   * stale within three beats.
   */
  live: boolean;
  /**
   * `live` while it beats on time; `suspect` once its beat is late (no beat for
   * `nodeBeatIntervalMs` plus a quarter of it, at most a second more): a node killed outright
   * turns suspect within about one interval, though nothing acts on that yet; `stale` once it is
   * not `live` (two intervals), when recovery may take its work over.
   */
  health: NodeHealth;
  /** Episodes whose row names this node as owner and is `running`. */
  runningEpisodes: number;
  /** Work claims this node holds with a lease still in the future. */
  liveClaims: number;
  lastSweep: LastSweep | null;
  /**
   * The actors it hosts (its `@Actor` classes, whatever their mode); null on a row that does not
   * say.
   */
  actors: string[] | null;
}

/**
 * The stored dispatch position of one event-triggered expectation on one bus channel. Retention
 * keeps the channel's events of `type` that it has not passed, up to `busUndispatchedMaxAgeMs`: a
 * position nobody hosts any more (its expectation was removed or renamed) holds them that long.
 */
export interface BusConsumerStatus {
  channel: string;
  /** `<actor id>.<expectation id>`. */
  consumer: string;
  /** The event type it takes; null on a row a previous release wrote (it holds every type). */
  type: string | null;
  /**
   * When a node last stored it (it moves whenever its consumer's events settle, and now and then
   * when idle).
   */
  updatedAt: Date;
  /** Events it skipped for a reason of their own, and the last reason. */
  skipped: number;
  lastSkip: string | null;
  /**
   * A live node of its channel (stack and env) hosts its actor. False for longer than a deploy
   * takes: nothing reads it any more; drop it (BusConsumers.drop) so it stops holding events.
   */
  hosted: boolean;
}

/** How many episodes of one actor are in one status, in the cluster status. */
export interface EpisodeCount {
  actorId: string;
  status: EpisodeStatus;
  count: number;
}

/**
 * The cluster as the database sees it: every node's row, and what is running, waiting and recently
 * finished.
 */
export interface ClusterStatus {
  /** The database's clock when it was read. */
  at: Date;
  nodes: ClusterNode[];
  /** Queued, deferred, running and blocked episodes, by actor and status. */
  active: EpisodeCount[];
  /** Episodes that finished within `windowMs`, by actor and terminal status. */
  finished: { windowMs: number; counts: EpisodeCount[] };
  /**
   * Trigger requests `pending` now (runs due, waiting for a node to take them), `scheduled` now
   * (wake-ups of sleeps, waits and retry backoffs not yet due), and `expiredInWindow`.
   */
  triggerRequests: { pending: number; scheduled: number; expiredInWindow: number };
  /** Every stored bus position, and whether a live node hosts it. */
  busConsumers: BusConsumerStatus[];
}

/** Options of the cluster status read. */
export interface ClusterStatusOptions {
  /**
   * How far back `finished` and `triggerRequests.expiredInWindow` look. Default 300 000 (5 min), at
   * most 86 400 000.
   */
  windowMs?: number;
}

export const MAX_STATUS_WINDOW_MS = 86_400_000;

/**
 * One statement, every part of it bounded by live work or the window, never by the history: the
 * active counts read the status index, finished ones an index-only range over `finished_at`, the
 * requests their (status, inserted_at) index, claims the index of held claims. The window
 * has an upper bound too (a minute ahead, which no row reaches): with no statistics yet for a large
 * table (right after a deploy, before autovacuum analyses it) the planner guesses a one-sided range
 * at a third of the table and reads all of it, a two-sided one at a fraction of a percent.
 */
const CLUSTER_STATUS = `
  WITH running AS (SELECT owner_node, count(*)::int AS n FROM cyclium_episodes
                   WHERE status = 'running' GROUP BY owner_node),
       claims AS (${liveClaimCounts()})
  SELECT now() AS at,
    coalesce((SELECT json_agg(json_build_object(
        'identity', n.node_identity, 'stack', n.stack, 'env', n.env, 'mode', n.mode, 'hostname',
        n.hostname, 'pid', n.pid,
        'version', n.version, 'startedAt', n.started_at, 'lastSeenAt', n.last_seen_at,
        'live', n.last_seen_at > now() - make_interval(secs => $1::float8 / 1000),
        'health', CASE WHEN n.last_seen_at > now() - make_interval(secs => $3::float8 / 1000)
          THEN 'live' WHEN n.last_seen_at > now() - make_interval(secs => $1::float8 / 1000)
          THEN 'suspect' ELSE 'stale' END,
        'runningEpisodes', coalesce(r.n, 0), 'liveClaims', coalesce(c.n, 0), 'lastSweep',
        n.last_sweep,
        'actors', n.actors)
        ORDER BY n.node_identity)
      FROM cyclium_nodes n LEFT JOIN running r ON r.owner_node = n.node_identity LEFT JOIN claims c
        ON c.owner_node = n.node_identity), '[]') AS nodes,
    coalesce((SELECT json_agg(json_build_object('actorId', actor_id, 'status', status, 'count', n)
                              ORDER BY actor_id, status)
      FROM (SELECT actor_id, status, count(*)::int AS n FROM cyclium_episodes
            WHERE status IN ('queued', 'throttled', 'deferred', 'waiting', 'running', 'blocked')
              GROUP BY 1, 2) a), '[]') AS active,
    coalesce((SELECT json_agg(json_build_object('actorId', actor_id, 'status', status, 'count', n)
                              ORDER BY actor_id, status)
      FROM (SELECT actor_id, status, count(*)::int AS n FROM cyclium_episodes
             WHERE finished_at > now() - make_interval(secs => $2::float8 / 1000)
               AND finished_at < now() + interval '1 minute' GROUP BY 1, 2) f), '[]') AS finished,
    (SELECT count(*)::int FROM cyclium_trigger_requests WHERE status = 'pending') AS pending,
    (SELECT count(*)::int FROM cyclium_trigger_requests WHERE status = 'scheduled') AS scheduled,
    (SELECT count(*)::int FROM cyclium_trigger_requests
      WHERE status = 'expired'
        AND inserted_at > now() - make_interval(secs => $2::float8 / 1000)) AS expired,
    ${STORED_POSITIONS} AS positions`;

interface Row {
  at: Date;
  nodes: Array<
    Omit<ClusterNode, 'startedAt' | 'lastSeenAt' | 'lastSweep'> & {
      startedAt: string;
      lastSeenAt: string;
      lastSweep: RawSweep | null;
    }
  >;
  active: EpisodeCount[];
  finished: EpisodeCount[];
  pending: number;
  scheduled: number;
  expired: number;
  positions: StoredPosition[];
}

type RawSweep = Omit<LastSweep, 'at'> & { at: string };

type Hosting = Pick<ClusterNode, 'stack' | 'env' | 'actors' | 'live'>;

/**
 * Whether a live node of `position`'s channel hosts its consumer's actor. The channel is a hash of
 * the stack and env (busChannel), so it is matched here rather than in SQL; a node row that does
 * not list its actors counts as hosting everything.
 */
export function hosts(
  nodes: ReadonlyArray<Hosting>,
  position: Pick<StoredPosition, 'channel' | 'consumer'>,
): boolean {
  const ofActor = (actor: string) => position.consumer.startsWith(`${actor}.`);
  const hostsActor = (actors: string[] | null) => actors === null || actors.some(ofActor);
  return nodes.some(
    (n) => n.live && busChannel(n.stack, n.env) === position.channel && hostsActor(n.actors),
  );
}

/**
 * Reads the cluster for `CycliumStatus.cluster()`; a burst of callers within `cacheMs` shares one
 * read.
 */
@Injectable()
export class ClusterStatusReader {
  private readonly reads = new SharedRead<number, ClusterStatus>();

  constructor(
    private readonly database: CycliumDataSource,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  read(windowMs: number, cacheMs: number): Promise<ClusterStatus> {
    return this.reads.get(windowMs, cacheMs, () => this.query(windowMs));
  }

  private async query(windowMs: number): Promise<ClusterStatus> {
    const beat = this.options.nodeBeatIntervalMs;
    const { rows } = await this.database.sql.query<Row>(CLUSTER_STATUS, [
      2 * beat,
      windowMs,
      beat + Math.min(beat / 4, 1_000),
    ]);
    const [row] = rows;
    const nodes = row.nodes.map((n) => ({
      ...n,
      startedAt: new Date(n.startedAt),
      lastSeenAt: new Date(n.lastSeenAt),
      lastSweep: n.lastSweep ? { ...n.lastSweep, at: new Date(n.lastSweep.at) } : null,
    }));
    return {
      at: row.at,
      nodes,
      active: row.active,
      finished: { windowMs, counts: row.finished },
      triggerRequests: {
        pending: row.pending,
        scheduled: row.scheduled,
        expiredInWindow: row.expired,
      },
      busConsumers: row.positions.map((p) => ({
        ...p,
        updatedAt: new Date(p.updatedAt),
        hosted: hosts(nodes, p),
      })),
    };
  }
}
