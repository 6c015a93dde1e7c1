import { randomUUID } from 'node:crypto';
import type { QueryConfig } from 'pg';
import { Injectable, Logger } from '@nestjs/common';
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
import { episodeFlow } from './flow-pump.js';

/** Tells full nodes a request is waiting, so they need not wait for their next poll. */
export const REQUEST_WAKE_EVENT = 'cyclium.trigger_requests.pending';

export type DeferResult =
  | { status: 'deferred'; episode: EpisodeRow; requestId: string; notBefore: Date | null }
  | { status: 'duplicate' };

/**
 * A trigger written in the host's transaction: the episode (deferred) and its request exist in that
 * transaction only; once it commits, a node hosting the actor in full mode starts the episode
 * (`notBefore` its due time, null for at once). A rollback leaves neither. `duplicate`: a live
 * episode holds the dedupe key (nothing was written, and the host's transaction goes on).
 */
export type OnCommitResult =
  | { status: 'on_commit'; episode: EpisodeRow; requestId: string; notBefore: Date | null }
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

  private readonly logger = new Logger('CycliumDispatch');
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
    const spec = this.specOf(expectation, trigger, options);
    const { statement, wake } = this.deferStatement(randomUUID(), spec, options.delay ?? null);
    const { rows } = await this.database.sql.query(statement);
    const written = writtenOf(rows[0] as Record<string, unknown>);
    if (!written) return { status: 'duplicate' };
    wake.announce();
    if (options.delay) this.wakeWhenDue(options.delay);
    this.telemetry.emit('trigger_requests.deferred', {
      requestId: written.requestId,
      episodeId: written.episode.id,
    });
    return { status: 'deferred', ...written };
  }

  /**
   * `defer` through the host's open transaction on `client`, in one statement: the episode, its
   * request and the wake-up event, and a NOTIFY that PostgreSQL delivers when the host commits (a
   * rollback drops it with the rows). A duplicate writes nothing and raises nothing, so the host's
   * transaction goes on.
   */
  async deferInHost(
    client: SqlExecutor,
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): Promise<OnCommitResult> {
    const spec = this.specOf(expectation, trigger, options);
    const { statement } = this.deferStatement(randomUUID(), spec, options.delay ?? null, true);
    const { rows } = await client.query(statement);
    const written = writtenOf(rows[0] as Record<string, unknown>);
    if (!written) return { status: 'duplicate' };
    if (options.delay) this.wakeWhenDue(options.delay);
    return { status: 'on_commit', ...written };
  }

  private specOf(
    expectation: RegisteredExpectation,
    trigger: EpisodeTrigger,
    options: DispatchOptions,
  ): NewEpisode {
    if (!this.registry.get(expectation.actorId))
      throw new ActorDefinitionError(`actor ${expectation.actorId} is not hosted on this node`);
    return {
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
      // Stored now, so every node that later parks it (throttled) sees the same partition.
      flow: episodeFlow(expectation, trigger, this.logger),
    };
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

  /**
   * Episode `id` (deferred), its request and the wake-up: one statement, all or none. `atCommit`:
   * the statement also asks for the NOTIFY itself, delivered when its transaction commits.
   */
  private deferStatement(
    id: string,
    spec: NewEpisode,
    delay: TriggerDelay | null,
    atCommit = false,
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
    const notify = atCommit
      ? this.events.wakeAtCommit(statement, 'EXISTS (SELECT 1 FROM req)')
      : null;
    // A CTE that only reads runs only when referenced.
    if (notify) statement.with('notified', notify);
    return {
      statement: statement.build(
        `SELECT e.*, (SELECT id FROM req) AS request_id, (SELECT not_before FROM req) AS ` +
          `request_not_before${notify ? ', (SELECT count(*) FROM notified) AS notified' : ''} ` +
          `FROM (SELECT 1) one LEFT JOIN ep e ON true`,
      ),
      wake,
    };
  }
}

/** The episode and request a defer statement wrote; null when the dedupe index refused it. */
function writtenOf(
  row: Record<string, unknown>,
): { episode: EpisodeRow; requestId: string; notBefore: Date | null } | null {
  if (row.id === null) return null;
  const notBefore =
    row.request_not_before === null ? null : new Date(row.request_not_before as string | Date);
  return { episode: toEpisode(row), requestId: row.request_id as string, notBefore };
}
