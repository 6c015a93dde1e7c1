import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { UnknownActorError } from '../actors/unknown-actor.error.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { OutageLog } from '../sql/database-errors.js';
import { Mode } from './mode.service.js';

/** Announced on the bus after a pause or a resume: every node of the scope reads the pauses. */
const PAUSES_CHANGED = 'cyclium.actor.pauses';

/** An actor paused cluster-wide, in this node's stack and env. */
export interface ActorPause {
  actorId: string;
  pausedAt: Date;
  /** The node that paused it. */
  pausedBy: string | null;
  reason: string | null;
}

/** Rows of a stack and env (parameter numbers): NULL (none, the default env) equal to NULL. */
const inScope = (stack: number, env: number) =>
  `stack IS NOT DISTINCT FROM $${stack}::text AND env IS NOT DISTINCT FROM $${env}::text`;
const IN_SCOPE = inScope(1, 2);

/**
 * Pauses and resumes an actor across every node of this stack and env. A pause is a row, read by
 * every node at boot, in each node beat's own statement (`beatColumn`, so an idle node pays no
 * statement for it) and at once when one is announced: the nodes start nothing of a
 * paused actor (its Mode is `trigger_only`), and its triggers, wake-ups and recovered runs wait as
 * requests that never expire; running episodes finish. Resumed, the nodes take them up again.
 * While the database is away a node keeps the pauses it last read.
 */
@Injectable()
export class ActorPauses implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('CycliumDispatch');
  private readonly outage = new OutageLog(this.logger, 'reading paused actors');
  /** Reads of the table so far: a beat's answer that a fresher read overtook is not applied. */
  private reads = 0;
  private unsubscribe: (() => void) | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly mode: Mode,
    private readonly registry: ActorRegistry,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Before any trigger is taken (pollers and subscriptions start at bootstrap). */
  async onModuleInit(): Promise<void> {
    await this.database.atBoot('reading paused actors', () => this.refresh());
    this.unsubscribe = this.events.subscribe(PAUSES_CHANGED, () => void this.refreshQuietly());
  }

  /** Stops reading: a node shutting down starts nothing more anyway. */
  onApplicationShutdown(): void {
    this.unsubscribe?.();
  }

  /**
   * The column a node beat's statement selects (`paused`, the actor ids paused in the stack and env
   * its parameters `stack` and `env` name), and what to do with its answer: applied unless a pause,
   * a resume or an announce was read while the beat was under way. For NodeRegistry only.
   *
   * @internal
   */
  beatColumn(stack: number, env: number): { sql: string; apply(paused: string[]): void } {
    const at = this.reads;
    return {
      sql: `coalesce((SELECT array_agg(actor_id) FROM cyclium_actor_pauses
                       WHERE ${inScope(stack, env)}), '{}') AS paused`,
      apply: (paused) => {
        if (this.reads === at) this.mode.setPaused(paused);
      },
    };
  }

  /** The paused actors of this stack and env, oldest pause first. */
  async list(): Promise<ActorPause[]> {
    const { rows } = await this.database.sql.query<{
      actor_id: string;
      paused_at: Date;
      paused_by: string | null;
      reason: string | null;
    }>(
      `SELECT actor_id, paused_at, paused_by, reason FROM cyclium_actor_pauses
        WHERE ${IN_SCOPE} ORDER BY paused_at, actor_id`,
      this.scope(),
    );
    return rows.map((r) => ({
      actorId: r.actor_id,
      pausedAt: r.paused_at,
      pausedBy: r.paused_by,
      reason: r.reason,
    }));
  }

  /**
   * Pauses `actorId` on every node of this stack and env; throws UnknownActorError for an actor
   * this node does not declare (a typo would pause nothing that runs).
   */
  async pause(actorId: string, options: { reason?: string } = {}): Promise<'paused' | 'already'> {
    this.known(actorId, 'ActorPauses.pause');
    const { rowCount } = await this.database.sql.query(
      `INSERT INTO cyclium_actor_pauses (actor_id, stack, env, paused_by, reason)
       VALUES ($3, $1, $2, $4, $5)
       ON CONFLICT (actor_id, (coalesce(stack, '')), (coalesce(env, ''))) DO NOTHING`,
      [...this.scope(), actorId, this.identity.name(), options.reason ?? null],
    );
    await this.changed();
    return rowCount ? 'paused' : 'already';
  }

  /** Resumes `actorId` on every node of this stack and env. */
  async resume(actorId: string): Promise<'resumed' | 'not_paused'> {
    this.known(actorId, 'ActorPauses.resume');
    const { rowCount } = await this.database.sql.query(
      `DELETE FROM cyclium_actor_pauses WHERE ${IN_SCOPE} AND actor_id = $3`,
      [...this.scope(), actorId],
    );
    await this.changed();
    return rowCount ? 'resumed' : 'not_paused';
  }

  /** This node first (its answer is then true at once), the others by the bus or their beat. */
  private async changed(): Promise<void> {
    await this.refresh();
    this.events.announce(PAUSES_CHANGED, {});
  }

  private async refresh(): Promise<void> {
    const read = ++this.reads;
    const paused = (await this.list()).map((p) => p.actorId);
    if (read === this.reads) this.mode.setPaused(paused);
  }

  private async refreshQuietly(): Promise<void> {
    try {
      await this.refresh();
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }

  private known(actorId: string, where: string): void {
    if (!this.registry.declares(actorId) || !this.registry.get(actorId))
      throw new UnknownActorError(
        actorId,
        where,
        this.registry.all().map((actor) => actor.id),
      );
  }

  private scope(): [string | null, string | null] {
    return [this.options.stackSlug ?? null, this.options.env ?? null];
  }
}
