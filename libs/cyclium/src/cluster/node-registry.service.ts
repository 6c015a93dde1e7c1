import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { announcesListening } from '../bus/bus-audience.interface.js';
import { Bus } from '../bus/bus.interface.js';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { sameEnv, sameStack } from '../scope/scope-predicates.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { CYCLIUM_VERSION } from '../version.js';
import { OutageLog } from '../sql/database-errors.js';
import { DuplicateNodeIdentityError } from '../identity/duplicate-node-identity.error.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Peers } from './peers.service.js';
import { NodeSignatures, type SignedPeer } from './node-signatures.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { OutputRescue } from './output-rescue.service.js';
import { OutputStore } from '../outputs/output-store.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { ActorPauses } from '../dispatch/actor-pauses.service.js';
import { LifecycleDeclarations } from './lifecycle-declarations.service.js';

interface BeatRow {
  found: number;
  /** The database clock at this beat, as it prints it (microseconds kept). */
  seen_at: string;
  /**
   * This node's previous beat was older than three beat intervals: it was away (a freeze, an
   * outage).
   */
  gap: boolean;
  /**
   * The boot id the row had before this beat: another process's when two run under one identity.
   */
  previous_boot: string | null;
  peers: SignedPeer[];
  listeners: string[];
  outputs_due: boolean;
  /** The actors paused in this node's stack and env (ActorPauses). */
  paused: string[];
}

/**
 * The nodes that share this node's bus channel and take triggers (`peers`), and every node that
 * listens on it whatever its mode (`listeners`), seen within the staleness window (parameters:
 * stack, env, seconds). Read in the statement that registers or beats, so knowing the cluster
 * costs no round trip of its own.
 */
const CHANNEL_NODES_FROM = (stack: number, env: number, seconds: number) => `coalesce((
  SELECT json_agg(json_build_object('identity', node_identity, 'actors', actors, 'stack', stack,
                                    'env', env, 'mode', mode, 'signature', signature)
                  ORDER BY node_identity) FROM cyclium_nodes
   WHERE ${sameStack('stack', `$${stack}::text`)} AND ${sameEnv('env', `$${env}::text`)}
     AND mode <> 'disabled'
     AND last_seen_at > now() - make_interval(secs => $${seconds}::double precision)),
     '[]'::json) AS peers,
  coalesce((
  SELECT json_agg(node_identity) FROM cyclium_nodes
   WHERE ${sameStack('stack', `$${stack}::text`)} AND ${sameEnv('env', `$${env}::text`)}
     AND last_seen_at > now() - make_interval(secs => $${seconds}::double precision)),
     '[]'::json) AS listeners`;

/**
 * Keeps this node's row in `cyclium_nodes`: upserted at boot, `last_seen_at` refreshed on a timer.
 * The row is for operators, for recovery's "is that node gone?" question and for the peer list
 * triggers are ranked over (Peers); it is never a lock.
 */
@Injectable()
export class NodeRegistry implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumNode');
  private readonly outage = new OutageLog(this.logger, 'node beat');
  private timer: NodeJS.Timeout | undefined;
  /** Set once shutdown began: beats clear the boot id and never take the row back. */
  private going = false;
  /** The other boot last reported beating under this identity, so it is logged once. */
  private twinReported: string | null = null;
  /** See watchingSince. */
  private watching: string | null = null;
  private readonly signatures: NodeSignatures;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly database: CycliumDataSource,
    private readonly telemetry: CycliumTelemetry,
    private readonly peers: Peers,
    private readonly registry: ActorRegistry,
    private readonly outputs: OutputRescue,
    private readonly mode: Mode,
    private readonly pauses: ActorPauses,
    private readonly declarations: LifecycleDeclarations,
    signer: RowSigner,
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {
    this.signatures = new NodeSignatures(signer, this.logger);
  }

  async onApplicationBootstrap(): Promise<void> {
    // A database away at boot (a failover) is waited for: the twin check and the upsert start over.
    await this.database.atBoot('registering the node', () => this.register());
    this.timer = setInterval(() => void this.beat(), this.options.nodeBeatIntervalMs);
    this.timer.unref();
    // Peers rank only nodes whose row says they take triggers: a mode change is written at once.
    this.mode.onChange(() => void this.beat());
  }

  /**
   * Whether an output of a type this node takes is due (parameter `types`: null when it takes
   * none), asked in the statement the beat runs anyway: the outbox's scan costs an idle node no
   * transaction of its own, and the rescue writes only when something is due. Parameter numbers of
   * the types, this node's stack and its env (only rows of its scope count).
   */
  private outputsDue(types: number, stack: number, env: number): string {
    const due = OutputStore.dueFragment(`$${types}`, `$${stack}`, `$${env}`);
    return `($${types}::text[] IS NOT NULL AND ${due}) AS outputs_due`;
  }

  /**
   * Since when, by the database clock, this node has been beating without a gap of more than three
   * beat intervals: its boot, or its return from a freeze or a database outage; null before it
   * registered. What it saw of its peers is only as old as this (see NotHostedEpisodes).
   */
  watchingSince(): string | null {
    return this.watching;
  }

  /** A peer that missed three of this node's beat intervals is left out of the ranking. */
  private staleAfterSeconds(): number {
    return (3 * this.options.nodeBeatIntervalMs) / 1000;
  }

  /**
   * Shutdown began: the row's boot id is cleared (and stays so on the beats still to come), which
   * tells a process booting under this identity meanwhile that this one is going, not a twin.
   */
  async leaving(): Promise<void> {
    this.going = true;
    await this.beat();
  }

  /**
   * Stops beating and removes this node's row: a drained node is gone, and its queued episodes
   * adoptable. A row a newer process of this identity already took is left to it.
   */
  async deregister(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.database.sql
      .query(
        `DELETE FROM cyclium_nodes WHERE node_identity = $1 AND (boot_id IS NULL OR boot_id = $2)`,
        [this.identity.name(), this.identity.bootId],
      )
      .catch((error: unknown) =>
        this.logger.warn(`could not deregister the node: ${String(error)}`),
      );
  }

  /**
   * Refuses to boot while another process runs this identity. A fresh row with another boot id
   * may be a live twin or a process that just died (kill -9, then the same identity at once):
   * only a beat seen to advance tells them apart, so this watches the row until it is older than
   * two beat intervals (the previous process is gone) or it advances (a twin: refused). A row
   * whose boot id was cleared belongs to a process that is going: that is only warned about.
   */
  private async refuseTwin(): Promise<void> {
    const me = this.identity.name();
    const goneAfterMs = 2 * this.options.nodeBeatIntervalMs;
    const read = async () =>
      (
        await this.database.sql.query<{ boot_id: string | null; seen: string; age_ms: number }>(
          `SELECT boot_id, last_seen_at::text AS seen,
          (extract(epoch FROM now() - last_seen_at) * 1000)::float8 AS age_ms
             FROM cyclium_nodes WHERE node_identity = $1`,
          [me],
        )
      ).rows[0];
    const first = await read();
    if (!first || first.boot_id === this.identity.bootId || first.age_ms >= goneAfterMs) return;
    const going = () =>
      this.logger.warn(
        `node identity "${me}" is still registered by a process that is shutting down; taking it ` +
          `over`,
      );
    if (first.boot_id === null) return going();
    const waitMs = Math.ceil(goneAfterMs - first.age_ms);
    this.logger.log(
      `node identity "${me}" beat ${Math.round(first.age_ms)} ms ago from another process (boot ` +
        `id ${first.boot_id}): waiting up to ${waitMs} ms to see whether it stopped (a process ` +
        `killed outright) or still beats (a twin, refused)`,
    );
    const until = performance.now() + waitMs;
    while (performance.now() < until) {
      await sleep(Math.min(250, this.options.nodeBeatIntervalMs / 4));
      const now = await read();
      if (!now) return;
      if (now.boot_id === null) return going();
      if (now.seen !== first.seen || now.boot_id !== first.boot_id)
        throw new DuplicateNodeIdentityError(me, now.boot_id);
    }
    this.logger.log(
      `node identity "${me}": the previous process (boot id ${first.boot_id}) stopped beating; ` +
        `taking its place`,
    );
  }

  async register(): Promise<void> {
    await this.refuseTwin();
    const { stackSlug, env } = this.options;
    const mode = this.mode.current;
    const { rows } = await this.database.sql.query<BeatRow>(
      `WITH me AS (
         INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version,
                                    actors, boot_id,
                                    started_at, last_seen_at, signature, expectations)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $9, $11, now(), now(), $12, $13::jsonb)
         ON CONFLICT (node_identity) DO UPDATE
           SET stack = EXCLUDED.stack, env = EXCLUDED.env, mode = EXCLUDED.mode,
               hostname = EXCLUDED.hostname,
               pid = EXCLUDED.pid, version = EXCLUDED.version, actors = EXCLUDED.actors,
               boot_id = EXCLUDED.boot_id,
               started_at = now(), last_seen_at = now(), signature = EXCLUDED.signature,
               expectations = EXCLUDED.expectations
         RETURNING 1)
       SELECT (SELECT count(*) FROM me)::int AS found, now()::text AS seen_at,
              ${CHANNEL_NODES_FROM(2, 3, 8)}, ${this.outputsDue(10, 2, 3)}`,
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
        this.identity.bootId,
        this.signatureOf(mode),
        this.expectationsValue(),
      ],
    );
    const row = rows[0] as BeatRow;
    this.watching = row.seen_at;
    this.peers.update(this.signatures.trusted(row.peers), row.listeners);
    if (row.outputs_due) this.outputs.request();
    if (announcesListening(this.bus)) this.bus.announceListening();
    await this.declarations.registered();
    this.telemetry.emit('node.registered', { stack: stackSlug, env, mode });
  }

  /**
   * A missed beat is logged once per outage and retried on the next tick; liveness is advisory,
   * not a lease. A row that went missing (deleted by an operator, a restored database) is written
   * again, unless this node is going. The beat writes this process's boot id ($7; NULL once going,
   * and then only over its own row): one that finds another there shares its identity with a live
   * process that got past the boot check, and says so.
   */
  async beat(): Promise<void> {
    const paused = this.pauses.beatColumn(2, 3);
    try {
      const { rows } = await this.database.sql.query<BeatRow>(
        `WITH previous AS (SELECT boot_id, last_seen_at FROM cyclium_nodes
                           WHERE node_identity = $1),
              me AS (UPDATE cyclium_nodes
                     SET last_seen_at = now(), mode = $6, boot_id = $7, signature = $9
                      WHERE node_identity = $1
                        AND ($7::uuid IS NOT NULL OR boot_id IS NULL OR boot_id = $8) RETURNING 1)
         SELECT (SELECT count(*) FROM me)::int AS found,
                (SELECT boot_id FROM previous) AS previous_boot,
                now()::text AS seen_at,
                coalesce((SELECT last_seen_at
                          FROM previous) < now() - make_interval(secs => $4::double precision),
                         false) AS gap,
                ${CHANNEL_NODES_FROM(2, 3, 4)}, ${this.outputsDue(5, 2, 3)}, ${paused.sql}`,
        [
          this.identity.name(),
          this.options.stackSlug,
          this.options.env,
          this.staleAfterSeconds(),
          this.outputs.wanted(),
          this.mode.current,
          this.going ? null : this.identity.bootId,
          this.identity.bootId,
          this.signatureOf(this.mode.current),
        ],
      );
      const row = rows[0] as BeatRow;
      if (row.gap) this.watching = row.seen_at;
      paused.apply(row.paused);
      this.peers.update(this.signatures.trusted(row.peers), row.listeners);
      if (row.outputs_due) this.outputs.request();
      this.reportTwin(row.previous_boot);
      if (row.found === 0 && this.timer && !this.going) await this.register();
      // Narrows the declaration once handlers left (a widening is declared at once).
      else if (!this.going) await this.declarations.settled();
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }

  /**
   * The `expectations` column: the expectations this node hosts, by actor, tagged with this
   * process's boot id. A release from before the column that takes this identity over rewrites the
   * row's boot id but not the column: the tag no longer matching, the stale list is not read as
   * the older release's (see NOT_HOSTED).
   */
  private expectationsValue(): string {
    return JSON.stringify({
      boot: this.identity.bootId,
      hosted: this.registry.hostedExpectations(),
    });
  }

  private signatureOf(mode: string): string | null {
    const actors = this.registry.all().map((actor) => actor.id);
    return this.signatures.sign(
      this.identity.name(),
      this.options.stackSlug,
      this.options.env,
      mode,
      actors,
    );
  }

  private reportTwin(previous: string | null): void {
    if (
      this.going ||
      previous === null ||
      previous === this.identity.bootId ||
      previous === this.twinReported
    )
      return;
    this.twinReported = previous;
    this.logger.error(
      `node identity "${this.identity.name()}" is also beating from another live process (boot ` +
        `id ${previous}): ` +
        `two processes under one identity take each other's work for their own; give each its ` +
        `own nodeIdentity`,
    );
  }
}
