import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { hostname } from 'node:os';
import { announcesListening } from '../bus/bus-audience.interface.js';
import { Bus } from '../bus/bus.interface.js';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { CYCLIUM_VERSION } from '../version.js';
import { OutageLog } from '../database/database-errors.js';
import { NodeIdentity } from './node-identity.service.js';
import { Peers, type Peer } from './peers.service.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { OutputRescue } from '../outputs/output-rescue.service.js';
import { OutputStore } from '../outputs/output-store.js';

interface BeatRow {
  found: number;
  peers: Peer[];
  listeners: string[];
  outputs_due: boolean;
}

/**
 * The nodes that share this node's bus channel and take triggers (`peers`), and every node that
 * listens on it whatever its mode (`listeners`), seen within the staleness window (parameters:
 * stack, env, seconds). Read in the statement that registers or beats, so knowing the cluster
 * costs no round trip of its own.
 */
const CHANNEL_NODES_FROM = (stack: number, env: number, seconds: number) => `coalesce((
  SELECT json_agg(json_build_object('identity', node_identity, 'actors', actors) ORDER BY node_identity) FROM cyclium_nodes
   WHERE stack IS NOT DISTINCT FROM $${stack}::text AND env IS NOT DISTINCT FROM $${env}::text AND mode <> 'disabled'
     AND last_seen_at > now() - make_interval(secs => $${seconds}::double precision)), '[]'::json) AS peers,
  coalesce((
  SELECT json_agg(node_identity) FROM cyclium_nodes
   WHERE stack IS NOT DISTINCT FROM $${stack}::text AND env IS NOT DISTINCT FROM $${env}::text
     AND last_seen_at > now() - make_interval(secs => $${seconds}::double precision)), '[]'::json) AS listeners`;

/**
 * Keeps this node's row in `cyclium_nodes`: upserted at boot, `last_seen_at` refreshed on a timer.
 * The row is for operators, for recovery's "is that node gone?" question and for the peer list
 * triggers are ranked over (Peers); it is never a lock.
 */
@Injectable()
export class NodeRegistry implements OnApplicationBootstrap {
  private readonly logger = new Logger(NodeRegistry.name);
  private readonly outage = new OutageLog(this.logger, 'node beat');
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly database: CycliumDataSource,
    private readonly telemetry: CycliumTelemetry,
    private readonly peers: Peers,
    private readonly registry: ActorRegistry,
    private readonly outputs: OutputRescue,
    private readonly mode: Mode,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.register();
    this.timer = setInterval(() => void this.beat(), this.options.nodeBeatIntervalMs);
    this.timer.unref();
    // Peers rank only nodes whose row says they take triggers: a mode change is written at once.
    this.mode.onChange(() => void this.beat());
  }

  /**
   * Whether an output of a type this node takes is due (parameter `types`: null when it takes
   * none), asked in the statement the beat runs anyway: the outbox's scan costs an idle node no
   * transaction of its own, and the rescue writes only when something is due.
   */
  private outputsDue(types: number): string {
    return `($${types}::text[] IS NOT NULL AND ${OutputStore.dueFragment(`$${types}`)}) AS outputs_due`;
  }

  /** A peer that missed three of this node's beat intervals is left out of the ranking. */
  private staleAfterSeconds(): number {
    return (3 * this.options.nodeBeatIntervalMs) / 1000;
  }

  /** Stops beating and removes this node's row: a drained node is gone, and its queued episodes adoptable. */
  async deregister(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.database.sql
      .query(`DELETE FROM cyclium_nodes WHERE node_identity = $1`, [this.identity.name()])
      .catch((error: unknown) => this.logger.warn(`could not deregister the node: ${String(error)}`));
  }

  async register(): Promise<void> {
    const { stackSlug, env } = this.options;
    const mode = this.mode.current;
    const { rows } = await this.database.sql.query<BeatRow>(
      `WITH me AS (
         INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, actors, started_at, last_seen_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $9, now(), now())
         ON CONFLICT (node_identity) DO UPDATE
           SET stack = EXCLUDED.stack, env = EXCLUDED.env, mode = EXCLUDED.mode, hostname = EXCLUDED.hostname,
               pid = EXCLUDED.pid, version = EXCLUDED.version, actors = EXCLUDED.actors, started_at = now(), last_seen_at = now()
         RETURNING 1)
       SELECT (SELECT count(*) FROM me)::int AS found, ${CHANNEL_NODES_FROM(2, 3, 8)}, ${this.outputsDue(10)}`,
      [
        this.identity.name(),
        stackSlug,
        env,
        mode,
        hostname(),
        process.pid,
        CYCLIUM_VERSION,
        this.staleAfterSeconds(),
        this.registry.all().map((actor) => actor.id),
        this.outputs.wanted(),
      ],
    );
    const row = rows[0] as BeatRow;
    this.peers.update(row.peers, row.listeners);
    if (row.outputs_due) this.outputs.request();
    if (announcesListening(this.bus)) this.bus.announceListening();
    this.telemetry.emit('node.registered', { stack: stackSlug, env, mode });
  }

  /**
   * A missed beat is logged once per outage and retried on the next tick; liveness is advisory,
   * not a lease. A row that went missing (deleted by an operator, a restored database) is written again.
   */
  async beat(): Promise<void> {
    try {
      const { rows } = await this.database.sql.query<BeatRow>(
        `WITH me AS (UPDATE cyclium_nodes SET last_seen_at = now(), mode = $6 WHERE node_identity = $1 RETURNING 1)
         SELECT (SELECT count(*) FROM me)::int AS found, ${CHANNEL_NODES_FROM(2, 3, 4)}, ${this.outputsDue(5)}`,
        [this.identity.name(), this.options.stackSlug, this.options.env, this.staleAfterSeconds(), this.outputs.wanted(), this.mode.current],
      );
      const row = rows[0] as BeatRow;
      this.peers.update(row.peers, row.listeners);
      if (row.outputs_due) this.outputs.request();
      if (row.found === 0 && this.timer) await this.register();
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }
}
