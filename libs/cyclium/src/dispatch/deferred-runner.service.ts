import { randomUUID } from 'node:crypto';
import type { QueryConfig } from 'pg';
import { Injectable } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import type { DispatchOptions } from './dispatch-result.js';
import type { TriggerDelay } from '../episodes/trigger-input.js';
import type { RegisteredExpectation } from '../actors/registered-actor.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Statement } from '../sql/statement.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { EpisodeStore, toEpisode } from '../episodes/episode-store.js';
import type { NewEpisode } from '../episodes/episode-inserts.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { TriggerRequests } from './trigger-requests.service.js';

/** Tells full nodes a request is waiting, so they need not wait for their next poll. */
export const REQUEST_WAKE_EVENT = 'cyclium.trigger_requests.pending';

export type DeferResult =
  | { status: 'deferred'; episode: EpisodeRow; requestId: string; notBefore: Date | null }
  | { status: 'duplicate' };

/** Past this, a run for later waits for the pollers alone: no timer is kept for it here. */
const DUE_TIMER_MAX_MS = 3_600_000;

/**
 * The runner of a trigger-only node: the episode row is created as always (deferred, so a UI shows
 * it), and instead of running it the node records a trigger request for a full node — both, and
 * the wake-up event, in one statement; the dedupe index still decides, so a duplicate writes
 * neither. The wake-up goes out after commit. A run for later is the same row with a due time:
 * every full node's poll takes it once due, and this node also wakes its own poller then (a
 * timer that is only a cache of the row: lost with the node, the polls still find it).
 */
@Injectable()
export class DeferredRunner {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeStore,
    private readonly requests: TriggerRequests,
    private readonly registry: ActorRegistry,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
  ) {}

  private readonly dueListeners = new Set<() => void>();
  private readonly dueTimers = new Set<NodeJS.Timeout>();

  /**
   * `listener` runs when a run this node deferred for later falls due (the poller polls then);
   * returns the unsubscribe.
   */
  onDue(listener: () => void): () => void {
    this.dueListeners.add(listener);
    return () => {
      this.dueListeners.delete(listener);
      if (this.dueListeners.size === 0) for (const timer of this.dueTimers) clearTimeout(timer);
    };
  }

  /**
   * Defers even while this node drains: nothing runs here, a full node takes the request, and a
   * draining node hands what it still holds to the cluster this way (Dispatcher.handOver).
   */
  async defer(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<DeferResult> {
    if (!this.registry.get(expectation.actorId))
      throw new ActorDefinitionError(`actor ${expectation.actorId} is not hosted on this node`);
    const spec: NewEpisode = {
      actorId: expectation.actorId,
      expectationId: expectation.id,
      trigger,
      dedupeKey: options.dedupeKey,
      status: 'running',
      ownerNode: null,
      maxAttempts: expectation.options.maxAttempts ?? 3,
      sourceStack: options.sourceStack,
      sourceEnv: options.sourceEnv,
      insertBefore: options.insertBefore,
    };
    const { statement, wake } = this.deferStatement(randomUUID(), spec, options.delay ?? null);
    const { rows } = await this.database.sql.query(statement);
    const row = rows[0] as Record<string, unknown>;
    if (row.id === null) return { status: 'duplicate' };
    wake.announce();
    const episode = toEpisode(row);
    const requestId = row.request_id as string;
    const notBefore =
      row.request_not_before === null ? null : new Date(row.request_not_before as string | Date);
    if (options.delay) this.wakeWhenDue(options.delay);
    this.telemetry.emit('trigger_requests.deferred', { requestId, episodeId: episode.id });
    return { status: 'deferred', episode, requestId, notBefore };
  }

  private wakeWhenDue(delay: TriggerDelay): void {
    const ms = 'ms' in delay ? delay.ms : delay.at.getTime() - Date.now();
    if (ms > DUE_TIMER_MAX_MS || this.dueListeners.size === 0) return;
    const timer = setTimeout(
      () => {
        this.dueTimers.delete(timer);
        for (const listener of this.dueListeners) listener();
      },
      Math.max(0, ms),
    );
    timer.unref();
    this.dueTimers.add(timer);
  }

  /**
   * The same, inside the caller's transaction, for an episode whose actor may run anywhere (a
   * workflow step): false when the dedupe index refused it. The wake-up is written with it; call
   * the returned announce after commit. `delayMs` keeps full nodes from taking it that long.
   */
  async deferWithin(
    client: SqlExecutor,
    id: string,
    spec: NewEpisode,
    delayMs: number,
  ): Promise<{ inserted: boolean; announce: Announce }> {
    const { statement, wake } = this.deferStatement(id, spec, delayMs > 0 ? { ms: delayMs } : null);
    const { rows } = await client.query(statement);
    return { inserted: (rows[0] as { id: string | null }).id !== null, announce: wake.announce };
  }

  /** Episode `id` (deferred), its request and the wake-up: one statement, all or none. */
  private deferStatement(
    id: string,
    spec: NewEpisode,
    delay: TriggerDelay | null,
  ): { statement: QueryConfig; wake: { announce: Announce } } {
    const me = this.identity.name();
    const statement = new Statement('defer');
    statement.with('ep', this.store.insertFragment(statement, id, spec, 'deferred'));
    statement.with(
      'req',
      this.requests.insertFragment(
        statement,
        id,
        {
          actorId: spec.actorId,
          expectationId: spec.expectationId,
          sourceNode: me,
          sourceStack: spec.sourceStack,
          sourceEnv: spec.sourceEnv,
          opts: {},
          ...(delay && ('ms' in delay ? { delayMs: delay.ms } : { runAt: delay.at })),
        },
        spec.trigger,
        'ep',
      ),
    );
    const wake = this.events.fragment(
      statement,
      [{ type: REQUEST_WAKE_EVENT, payload: { node: me } }],
      'EXISTS (SELECT 1 FROM req)',
    );
    if (wake.body) statement.with('wake', wake.body);
    return {
      statement: statement.build(
        `SELECT e.*, (SELECT id FROM req) AS request_id, (SELECT not_before FROM req) AS ` +
          `request_not_before FROM (SELECT 1) one LEFT JOIN ep e ON true`,
      ),
      wake,
    };
  }
}
