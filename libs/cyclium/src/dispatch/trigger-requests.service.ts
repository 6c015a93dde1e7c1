import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { Statement } from '../sql/statement.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTriggerRequest } from '../entities/trigger-request.entity.js';
import { emptyWhenAbsent, nullWhenAbsent, rowMapper } from '../entities/row-mapper.js';
import { isUuid } from '../sql/uuid.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { RetryWakeUps, WakeReason } from '../episodes/retry-wake-ups.interface.js';
import type { CanceledRequests } from '../episodes/canceled-requests.interface.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { sameEnv, sameEnvIndexed, stackCovers } from '../scope/scope-predicates.js';
import { signInPages, type CutoverScope } from '../integrity/unsigned-pages.js';
import { expirable, pendingStatement, takeable, type RequestFilter } from './due-requests.js';

/** What a deferring node records for a full node to run. */
export interface NewTriggerRequest {
  actorId: string;
  expectationId: string;
  sourceNode: string;
  sourceStack: string | null;
  sourceEnv: string | null;
  /** Runner options, such as `{ resume: true }` for a restart. */
  opts: Record<string, unknown>;
  /**
   * Due after this long (0: at once): accepted work, such as a run for later, a wake-up, a restart
   * or a handover, which never expires. Unset (and no `runAt`): a request to run now, which expires
   * once the TTL has run with a full node of its env up (see takeable).
   */
  delayMs?: number;
  /** Not to be taken before this time (a run at a given time); wins over `delayMs`. */
  runAt?: Date;
}

const toRequest = rowMapper(CycliumTriggerRequest, {
  opts: emptyWhenAbsent,
  notBefore: nullWhenAbsent,
});

type SignedRequest = Pick<
  NewTriggerRequest,
  'actorId' | 'expectationId' | 'sourceStack' | 'sourceEnv' | 'opts'
>;

/** What a request's signature covers. */
function requestFields(episodeId: string, request: SignedRequest, trigger: unknown): unknown[] {
  return [
    episodeId,
    request.actorId,
    request.expectationId,
    request.sourceStack,
    request.sourceEnv,
    request.opts,
    trigger,
  ];
}

/** A request the expiry ended, with the reason. */
export interface ExpiredRequest {
  id: string;
  episodeId: string;
  reason: string;
}

/** What a poll read: the requests due now, and when the next falls due (see poll). */
export interface PendingRequests {
  due: CycliumTriggerRequest[];
  nextDueInMs: number | null;
}

/** The claim key a full node takes a request under. */
export function requestClaimKey(id: string): string {
  return `trigger_request:${id}`;
}

/**
 * Retention: the requests of the episodes `due` (column `id`) lists, returning each one's claim key
 * (see requestClaimKey).
 */
export function deleteRequestsOf(statement: Statement, due: string): string {
  const prefix = statement.param(requestClaimKey(''), 'text');
  return (
    `DELETE FROM cyclium_trigger_requests r WHERE r.episode_id = ANY (ARRAY(SELECT id FROM ` +
    `${due})) RETURNING ${prefix} || r.id AS claim_key`
  );
}

/**
 * Every statement on cyclium_trigger_requests, and the reads an operator or a UI wants: the
 * requests trigger-only nodes deferred, oldest first, and what became of each.
 */
@Injectable()
export class TriggerRequests implements RetryWakeUps, CanceledRequests {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly signer: RowSigner,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  private readonly writtenHere = new Set<(dueInMs: number) => void>();

  /**
   * `listener` hears of each request this node writes with insertWithin (a sleep's, a backoff's or
   * a wait's wake-up, a restart deferred), with how soon it falls due: a poller that idles polls
   * then. Heard before the writing transaction commits (one that rolls back costs a poll for
   * nothing). Returns the unsubscribe.
   */
  onWrittenHere(listener: (dueInMs: number) => void): () => void {
    this.writtenHere.add(listener);
    return () => this.writtenHere.delete(listener);
  }

  /**
   * The request for episode `episodeId`, which the statement inserts (CTE `episodeCte` with column
   * `id`), written only when it did; signed with the episode's trigger (see verify).
   */
  insertFragment(
    statement: Statement,
    episodeId: string,
    request: NewTriggerRequest,
    trigger: unknown,
    episodeCte: string,
  ): string {
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    return `
      INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node,
                                            source_stack, source_env, status, opts, not_before,
                                            signature)
      SELECT e.id, ${p(request.actorId, 'text')}, ${p(request.expectationId, 'text')},
             ${p(request.sourceNode, 'text')},
             ${p(request.sourceStack, 'text')}, ${p(request.sourceEnv, 'text')}, 'pending',
             ${p(JSON.stringify(request.opts), 'jsonb')},
             coalesce(${p(request.runAt ?? null, 'timestamptz')},
                      now() + make_interval(
                                secs => ${p(request.delayMs ?? null, 'double precision')} / 1000)),
             ${p(this.signatureOf(episodeId, request, trigger), 'text')}
        FROM ${episodeCte} e
      RETURNING id, not_before`;
  }

  /**
   * Inserts a request inside the caller's transaction (a deferred restart; a retry's wake-up,
   * `scheduled`, which a node of the previous release never reads), signed with its episode's
   * trigger.
   */
  async insertWithin(
    client: SqlExecutor,
    episodeId: string,
    request: NewTriggerRequest,
    trigger: unknown,
    status: 'pending' | 'scheduled' = 'pending',
  ): Promise<string> {
    const { rows } = await client.query<{ id: string }>(
      `INSERT INTO cyclium_trigger_requests (episode_id, actor_id, expectation_id, source_node,
                                             source_stack, source_env, status, opts, signature,
                                             not_before)
       VALUES ($1, $2, $3, $4, $5, $6, $9, $7, $8,
               now() + make_interval(secs => $10::double precision / 1000))
       RETURNING id`,
      [
        episodeId,
        request.actorId,
        request.expectationId,
        request.sourceNode,
        request.sourceStack,
        request.sourceEnv,
        JSON.stringify(request.opts),
        this.signatureOf(episodeId, request, trigger),
        status,
        request.delayMs ?? null,
      ],
    );
    for (const listener of this.writtenHere) listener(Math.max(0, request.delayMs ?? 0));
    return (rows[0] as { id: string }).id;
  }

  /**
   * A `waiting` episode's wake-up (a retry's backoff, a sleep, an operator's retry): `scheduled`,
   * due after `delayMs`, resuming the episode from its journal.
   */
  async scheduleWithin(
    client: SqlExecutor,
    episode: EpisodeRow,
    delayMs: number,
    node: string,
    reason: WakeReason,
  ): Promise<void> {
    const request = {
      actorId: episode.actorId,
      expectationId: episode.expectationId,
      sourceNode: node,
      sourceStack: episode.sourceStack,
      sourceEnv: episode.sourceEnv,
      opts: { resume: true, wake: reason },
      delayMs,
    };
    await this.insertWithin(client, episode.id, request, episode.triggerRef, 'scheduled');
  }

  /**
   * A wait's wake-ups of the episode still scheduled: completed (the wait ended, or a new one
   * writes its own).
   */
  async dropWaitsWithin(client: SqlExecutor, episodeId: string): Promise<void> {
    await client.query(
      `UPDATE cyclium_trigger_requests
          SET status = 'completed', completed_at = now(), error = 'the wait it was for ended'
        WHERE episode_id = $1 AND status = 'scheduled' AND opts ->> 'wake' = 'wait'`,
      [episodeId],
    );
  }

  /**
   * The requests still to run of the episodes a cancel ends (a sleep's or a backoff's wake-up, a
   * run for later), completed by the cancel's own statement so lists and counts stop showing them
   * as due. One another transaction holds is skipped, not waited for: a take and the expiry lock
   * the request before its episode, a cancel the other way round, so waiting could deadlock; each
   * of them ends the request itself (a take then finds the episode canceled and starts nothing).
   */
  completeFor(canceled: string): string {
    return `UPDATE cyclium_trigger_requests
               SET status = 'completed', completed_at = now(), error = 'its episode was canceled'
             WHERE id IN (SELECT r.id FROM cyclium_trigger_requests r
                           WHERE r.episode_id IN (SELECT id FROM ${canceled})
                             AND r.status IN ('pending', 'scheduled')
                             FOR NO KEY UPDATE OF r SKIP LOCKED)`;
  }

  /** The condition that a wake-up `node` wrote waits for the episode `e` (see scheduleWithin). */
  scheduledBy(e: string, node: string): string {
    return `EXISTS (SELECT 1 FROM cyclium_trigger_requests r
                     WHERE r.episode_id = ${e}.id AND r.status = 'scheduled'
                       AND r.source_node = ${node})`;
  }

  /**
   * Whether a request and the episode it names are as a node of this deployment wrote them (the
   * `integrity` option; always true without it): the request's episode, actor, expectation, scope
   * and options, and the episode's actor, expectation and trigger, so neither row can be edited to
   * run something else. An unsigned request passes only before the cut-over (RowSigner.accepts).
   */
  verify(
    request: CycliumTriggerRequest,
    episode: Pick<EpisodeRow, 'id' | 'actorId' | 'expectationId' | 'triggerRef'>,
  ): boolean {
    if (!this.signer.enabled) return true;
    const { episodeId } = request;
    if (episode.id !== episodeId || episode.actorId !== request.actorId) return false;
    if (episode.expectationId !== request.expectationId) return false;
    const fields = requestFields(episodeId, request, episode.triggerRef);
    return this.signer.accepts('trigger_request', fields, request.signature);
  }

  /**
   * A node whose beat is older than this counts as down (three beats missed, as Peers count them).
   */
  private get goneAfterMs(): number {
    return 3 * this.options.nodeBeatIntervalMs;
  }

  /**
   * At the `integrity` cut-over, inside its transaction: signs the unsigned requests still waiting
   * in `scope` (with their episode's trigger), locked until the cut-over commits; returns how many.
   * A request whose episode is gone stays unsigned: nothing of it can run.
   */
  async signUnsigned(client: SqlExecutor, scope: CutoverScope): Promise<number> {
    type Waiting = { request: CycliumTriggerRequest; trigger: unknown };
    const read = async (after: Waiting | null, limit: number): Promise<Waiting[]> => {
      const { rows } = await client.query<Record<string, unknown>>(
        `SELECT r.*, e.trigger_ref AS episode_trigger
           FROM cyclium_trigger_requests r JOIN cyclium_episodes e ON e.id = r.episode_id
          WHERE r.signature IS NULL AND r.status IN ('pending', 'scheduled')
            AND ${stackCovers('r.source_stack', '$1::text')}
            AND ${sameEnv('r.source_env', '$2::text')}
            AND ($3::uuid IS NULL OR r.id > $3::uuid)
          ORDER BY r.id LIMIT $4 FOR UPDATE OF r`,
        [scope.stack, scope.env, after?.request.id ?? null, limit],
      );
      return rows.map((row) => ({ request: toRequest(row), trigger: row.episode_trigger }));
    };
    const sign = ({ request, trigger }: Waiting) => {
      const fields = requestFields(request.episodeId, request, trigger);
      return this.signer.sign('trigger_request', fields);
    };
    const write = (page: Waiting[]) =>
      client.query(
        `UPDATE cyclium_trigger_requests r SET signature = v.signature
           FROM unnest($1::uuid[], $2::text[]) AS v (id, signature) WHERE r.id = v.id
             AND r.signature IS NULL`,
        [page.map((w) => w.request.id), page.map(sign)],
      );
    return signInPages(read, write);
  }

  private signatureOf(
    episodeId: string,
    request: NewTriggerRequest,
    trigger: unknown,
  ): string | null {
    if (!this.signer.enabled) return null;
    // As the episode row will hold it: a JSON round trip, as jsonb makes.
    return this.signer.sign(
      'trigger_request',
      requestFields(episodeId, request, JSON.parse(JSON.stringify(trigger ?? null)) as unknown),
    );
  }

  /**
   * The testing kit's clock moved `ms` ahead: every request due later is due `ms` sooner (one to
   * run now has no due time to move). Production code never calls it.
   */
  async bringForward(ms: number): Promise<void> {
    await this.database.sql.query(
      `UPDATE cyclium_trigger_requests SET not_before = not_before - $1 * interval '1 millisecond'
        WHERE status IN ('pending', 'scheduled') AND not_before IS NOT NULL`,
      [ms],
    );
  }

  /** How many requests are due now, in any scope (the testing kit's idle check). */
  async dueCount(): Promise<number> {
    const { rows } = await this.database.sql.query<{ due: number }>(
      `SELECT count(*)::int AS due FROM cyclium_trigger_requests
        WHERE status IN ('pending', 'scheduled') AND coalesce(not_before, inserted_at) <= now()`,
    );
    return rows[0]?.due ?? 0;
  }

  /** Pending requests a poller may take, oldest first. */
  async pending(filter: RequestFilter): Promise<CycliumTriggerRequest[]> {
    return (await this.poll(filter, 0)).due;
  }

  /**
   * Pending requests a poller may take now, oldest first, and in how long the first of the others
   * falls due within `horizonMs` (null when none does: the page may also have been full).
   */
  async poll(filter: RequestFilter, horizonMs: number): Promise<PendingRequests> {
    if (Object.keys(filter.hosted).length === 0 || filter.limit < 1)
      return { due: [], nextDueInMs: null };
    const statement = pendingStatement(
      filter,
      this.options.triggerRequestTtlMs,
      this.goneAfterMs,
      horizonMs,
    );
    const { rows } = await this.database.sql.query<Record<string, unknown>>(statement);
    const due = rows.filter((row) => row.due_now === true);
    const later = rows.find((row) => row.due_now !== true);
    return {
      due: due.map(toRequest),
      nextDueInMs: later ? Math.max(0, Number(later.due_in_ms)) : null,
    };
  }

  /**
   * Takes a pending request for `owner`, inside the caller's transaction; false when another node
   * got there.
   */
  async take(client: SqlExecutor, id: string, owner: string): Promise<boolean> {
    const { rowCount } = await client.query(
      `UPDATE cyclium_trigger_requests
        SET status = 'completed', claimed_by = $2, claimed_at = now(), completed_at = now()
        WHERE id = $1 AND status IN ('pending', 'scheduled')
          AND (not_before IS NULL OR not_before <= now())
          AND ${takeable('$3', {
            env: 'cyclium_trigger_requests.source_env',
            goneAfter: '$4',
            me: '$2',
          })}`,
      [id, owner, this.options.triggerRequestTtlMs, this.goneAfterMs],
    );
    return rowCount === 1;
  }

  /** Ends a request this node took without a run, with the reason (its episode is gone, say). */
  async fail(client: SqlExecutor, id: string, reason: string): Promise<void> {
    await client.query(
      `UPDATE cyclium_trigger_requests SET status = 'failed', error = $2, completed_at = now() ` +
        `WHERE id = $1`,
      [id, reason],
    );
  }

  /** Notes on a taken request why nothing ran (its episode had already ended, say). */
  async note(client: SqlExecutor, id: string, reason: string): Promise<void> {
    await client.query(`UPDATE cyclium_trigger_requests SET error = $2 WHERE id = $1`, [
      id,
      reason,
    ]);
  }

  /**
   * Expires the requests to run now (no due time) that no node took within the TTL, counted while
   * a full node of this node's env was up (by the database clock: see takeable), with the reason;
   * returns their episodes. A request with a due time never expires: it waits for a node that
   * hosts its actor, and so does every request while no full node of its env is up (`me`, when
   * full, counts as one whatever its row says yet). Every node that is not
   * disabled runs it: a row another node is expiring (or taking) at the same moment is skipped
   * rather than waited for, so nodes never queue up behind each other here, and each request
   * expires once.
   */
  async expire(
    client: SqlExecutor,
    env: string | null,
    me: string | null,
  ): Promise<ExpiredRequest[]> {
    const ttl = this.options.triggerRequestTtlMs;
    const { rows } = await client.query<{ id: string; episode_id: string; error: string }>(
      `UPDATE cyclium_trigger_requests
          SET status = 'expired', completed_at = now(),
              error = 'pending for more than ' || $1 || ' ms: no full node that hosts ' ||
                actor_id || ' took it'
        WHERE id IN (SELECT id FROM cyclium_trigger_requests
                      WHERE status IN ('pending', 'scheduled')
                        AND ${sameEnvIndexed('source_env', '$2', env)}
                        AND ${expirable('$1', { env: '$2::text', goneAfter: '$3', me: '$4' })}
                      FOR NO KEY UPDATE SKIP LOCKED)
       RETURNING id, episode_id, error`,
      [ttl, env, this.goneAfterMs, me],
    );
    return rows.map((r) => ({ id: r.id, episodeId: r.episode_id, reason: r.error }));
  }

  /** One request, for a UI. */
  async get(id: string): Promise<CycliumTriggerRequest | null> {
    if (!isUuid(id)) return null;
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_trigger_requests WHERE id = $1`,
      [id],
    );
    return rows[0] ? toRequest(rows[0]) : null;
  }

  /** The requests of one episode, oldest first. */
  async forEpisode(episodeId: string): Promise<CycliumTriggerRequest[]> {
    if (!isUuid(episodeId)) return [];
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_trigger_requests WHERE episode_id = $1 ORDER BY inserted_at, id`,
      [episodeId],
    );
    return rows.map(toRequest);
  }

  /**
   * When each of these episodes that waits for a request falls due, and what it waits for: `start`
   * (a run for later, or a trigger-only node's), or the `WakeReason` of a waiting one. One read for
   * a page.
   */
  async waitsOf(
    episodeIds: readonly string[],
  ): Promise<Map<string, { dueAt: Date; waitingFor: WakeReason | 'start' }>> {
    if (episodeIds.length === 0) return new Map();
    const { rows } = await this.database.sql.query<{
      episode_id: string;
      due_at: Date;
      wake: WakeReason | null;
    }>(
      `SELECT DISTINCT ON (episode_id) episode_id, coalesce(not_before, inserted_at) AS due_at,
              coalesce(opts->>'wake', CASE WHEN opts->>'resume' = 'true' THEN 'resume' END) AS wake
         FROM cyclium_trigger_requests WHERE episode_id = ANY($1::uuid[])
           AND status IN ('pending', 'scheduled')
        ORDER BY episode_id, coalesce(not_before, inserted_at)`,
      [episodeIds],
    );
    return new Map(
      rows.map((r) => [r.episode_id, { dueAt: r.due_at, waitingFor: r.wake ?? 'start' }]),
    );
  }

  /** The newest requests, optionally of one status: the operations page's list. */
  async recent(
    status: CycliumTriggerRequest['status'] | undefined,
    limit: number,
  ): Promise<CycliumTriggerRequest[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_trigger_requests WHERE $1::text IS NULL OR status = $1 ORDER BY ` +
        `inserted_at DESC, id DESC LIMIT $2`,
      [status ?? null, limit],
    );
    return rows.map(toRequest);
  }
}
