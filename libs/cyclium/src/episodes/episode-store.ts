import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { FencedStatement } from '../leases/claims-in-statement.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { EpisodeRetention } from './episode-retention.js';
import { CANCELED_REQUESTS, type CanceledRequests } from './canceled-requests.interface.js';
import { Statement } from '../sql/statement.js';
import { CycliumEpisode, type EpisodeStatus } from '../entities/episode.entity.js';
import { nullWhenAbsent, rowMapper, type RowMapper } from '../entities/row-mapper.js';
import type { EpisodeRow, EpisodeTrigger } from './episode-context.interface.js';
import {
  begunRow,
  episodeRow,
  insertEpisodes,
  insertOf,
  isFresh,
  type EpisodeInsert,
  type NewEpisode,
  type RowClaim,
} from './episode-inserts.js';
import { wokenMarker } from './episode-journal.js';
import type { EpisodeFlow } from './flow-limits.js';
import { EpisodeSignatures, IN_FLIGHT } from './episode-signatures.js';
import { signInPages, type CutoverScope } from '../integrity/unsigned-pages.js';
import { sameEnv, stackCovers } from '../scope/scope-predicates.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/** A row written as it is, for seeding and tests (`Episodes.create`). */
export interface SeedEpisode {
  actorId: string;
  expectationId: string;
  triggerType: EpisodeTrigger['type'];
  payload: unknown;
  status: EpisodeStatus;
  dedupeKey: string | null;
  ownerNode: string | null;
  maxAttempts: number;
  sourceStack: string | null;
  sourceEnv: string | null;
  /** null: the database clock, when the row is running. */
  startedAt: Date | null;
}

export interface EpisodePage {
  actorId?: string;
  status?: EpisodeStatus;
  /** Undefined: any; null: rows with none. */
  sourceStack?: string | null;
  sourceEnv?: string | null;
  eventId?: string;
  /** Its dedupe key as stored (the page shows it so). */
  dedupeKey?: string;
  limit: number;
  /** `[inserted_at as the database prints it, id]` of the last row of the previous page. */
  after?: [string, string];
}

/**
 * The first write of a restarted run, fenced (continues `WITH owner AS (...)`, see
 * WorkClaims.fencedStatement): it leaves phase `recovering` only while the handed-over claim is
 * still this node's, with its `woken` marker (its wait for a slot may have been long).
 */
export const RESUME_START: FencedStatement = {
  name: 'episodes_resume_start',
  // Continues the WITH list: the run's `woken` marker ends the quiet time of its wait for a slot.
  body: `,
  ep AS (
    UPDATE cyclium_episodes SET phase = NULL, owner_node = $2, updated_at = now()
      FROM owner
     WHERE cyclium_episodes.id = $4 AND status = ${KEYED_RUNNING} AND phase = 'recovering'
       AND owner_node = $2
    RETURNING cyclium_episodes.*),
  woken AS (${wokenMarker('ep', '$2::text')})
  SELECT * FROM ep`,
};

/** Maps a `cyclium_episodes` row as pg returns it onto the entity's shape. */
export const toEpisode: RowMapper<EpisodeRow> = rowMapper(CycliumEpisode, {
  cancelRequestedAt: nullWhenAbsent,
  signature: nullWhenAbsent,
  waitingFor: nullWhenAbsent,
  result: nullWhenAbsent,
  flowKey: nullWhenAbsent,
  rateKey: nullWhenAbsent,
});

/**
 * The episode a begin inserted (`insert`), from the BEGUN_COLUMNS its statement `returned`: the
 * stored row, as `toEpisode` maps `SELECT *`.
 */
export const begunEpisode = (
  insert: EpisodeInsert,
  returned: Record<string, unknown>,
): EpisodeRow => toEpisode(begunRow(insert, returned));

/** The first row mapped, or null when there is none. */
export const oneEpisode = (rows: Array<Record<string, unknown>>): EpisodeRow | null =>
  rows[0] ? toEpisode(rows[0]) : null;

/**
 * The statements on cyclium_episodes that create, move and read episodes: inserts (all of them
 * the one shape of episode-inserts), status moves, lookups. The terminal write is terminal-writes',
 * the queue's statements are in EpisodeQueue, recovery's and the drain's in EpisodeRecoveryStore:
 * these are the only rooms that write this table. `via` is a client
 * inside the caller's transaction where the write must commit with others; the pool otherwise.
 */
@Injectable()
export class EpisodeStore {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly signatures: EpisodeSignatures,
    @Inject(CANCELED_REQUESTS) private readonly requests: CanceledRequests,
  ) {}

  /** Inserts unless a live episode already has the dedupe key; null when another insert won. */
  async insert(spec: NewEpisode, via: SqlExecutor = this.database.sql): Promise<EpisodeRow | null> {
    const statement = new Statement('episodes_insert');
    statement.with('ep', this.insertFragment(statement, randomUUID(), spec, spec.status));
    return oneEpisode((await via.query(statement.build('SELECT * FROM ep'))).rows);
  }

  /**
   * Inserts episode `id` as a CTE of the caller's statement: `running` (started now, on
   * `spec.ownerNode`), `queued`, or `deferred` (waiting for a full node, owned by none); the dedupe
   * index decides.
   */
  insertFragment(
    statement: Statement,
    id: string,
    spec: NewEpisode,
    status: Extract<EpisodeStatus, 'running' | 'queued' | 'throttled' | 'deferred'>,
  ): string {
    return insertEpisodes(
      `(${episodeRow(statement, this.signatures.signed(insertOf(id, spec, status)))})`,
    );
  }

  /**
   * Begins running episode `id` as a CTE of the caller's statement (insertFragment's insert), which
   * returns only the BEGUN_COLUMNS: `episode` turns the row the statement returns into the stored
   * row. `claim`: its first claim, written into the row (RowClaim).
   */
  beginFragment(
    statement: Statement,
    id: string,
    spec: NewEpisode,
    claim?: RowClaim,
  ): { body: string; episode: (returned: Record<string, unknown>) => EpisodeRow } {
    const insert = this.signatures.signed(insertOf(id, spec, 'running'));
    return {
      body: insertEpisodes(
        `(${episodeRow(statement, insert)})`,
        isFresh(spec) ? 'fail' : 'skip',
        'begun',
        claim,
      ),
      episode: (returned) => begunEpisode(insert, returned),
    };
  }

  /**
   * A deferred or waiting episode a full node took: running here now, its quiet time new (a run
   * that resumes from a journal gets its `woken` marker in the same statement). Null when it is
   * not deferred any more (or gone).
   */
  async startDeferred(client: SqlExecutor, id: string, owner: string): Promise<EpisodeRow | null> {
    const { rows } = await client.query(
      `WITH ep AS (
         UPDATE cyclium_episodes
            SET status = 'running', owner_node = $2, phase = NULL,
                started_at = coalesce(started_at, now()),
                updated_at = now()
          WHERE id = $1 AND status IN ('deferred', 'waiting') RETURNING *),
       woken AS (${wokenMarker('ep', '$2::text')})
       SELECT * FROM ep`,
      [id, owner],
    );
    return oneEpisode(rows);
  }

  /**
   * A deferred or waiting episode of a limited expectation that a full node took: `throttled`
   * until the admission starts it (FlowAdmissions), in the order of its priority and age from now.
   * Its partition and priority are the ones stored when it was triggered; a row without them (a
   * workflow step written where its actor is not hosted, a row from before its expectation had
   * limits) gets `flow(row)`, in the same transaction. Null when it is not deferred or waiting any
   * more (or gone).
   */
  async throttle(
    client: SqlExecutor,
    id: string,
    flow: (row: EpisodeRow) => EpisodeFlow,
  ): Promise<EpisodeRow | null> {
    // Without new columns, only a row that has its partition (the check refuses one without).
    const KEYED = ' AND flow_key IS NOT NULL';
    const throttled = (set: string, params: unknown[]) =>
      client.query(
        `UPDATE cyclium_episodes
            SET status = 'throttled', owner_node = NULL, phase = NULL, queued_at = now(),
                updated_at = now()${set}
          WHERE id = $1 AND status IN ('deferred', 'waiting')${set ? '' : KEYED}
         RETURNING *`,
        [id, ...params],
      );
    const kept = oneEpisode((await throttled('', [])).rows);
    if (kept) return kept;
    const { rows } = await client.query(
      `SELECT * FROM cyclium_episodes WHERE id = $1 AND status IN ('deferred', 'waiting')
        FOR NO KEY UPDATE`,
      [id],
    );
    const row = oneEpisode(rows);
    if (!row) return null;
    const { key, rateKey, priority } = flow(row);
    const set = `, flow_key = $2, rate_key = $3, priority = $4`;
    return oneEpisode((await throttled(set, [key, rateKey, priority])).rows);
  }

  /**
   * Deferred episodes whose request expired (or was tampered with): failed as `errorClass`, with
   * the reason; returns them.
   */
  async failDeferred(
    client: SqlExecutor,
    failures: Array<{ episodeId: string; reason: string }>,
    errorClass: 'trigger_request_expired' | 'tampered' = 'trigger_request_expired',
  ): Promise<EpisodeRow[]> {
    if (failures.length === 0) return [];
    const { rows } = await client.query(
      `UPDATE cyclium_episodes e
          SET status = 'failed', error_class = $3, error_detail = f.reason, finished_at = now(),
              updated_at = now()
         FROM unnest($1::uuid[], $2::text[]) AS f (id, reason)
        WHERE e.id = f.id AND e.status IN ('deferred', 'waiting')
       RETURNING e.*`,
      [failures.map((f) => f.episodeId), failures.map((f) => f.reason), errorClass],
    );
    return rows.map(toEpisode);
  }

  /** The status of each of `ids` that exists. */
  async statusesOf(ids: readonly string[]): Promise<Map<string, EpisodeStatus>> {
    if (ids.length === 0) return new Map();
    const { rows } = await this.database.sql.query<{ id: string; status: EpisodeStatus }>(
      `SELECT id, status FROM cyclium_episodes WHERE id = ANY($1::uuid[])`,
      [ids],
    );
    return new Map(rows.map((r) => [r.id, r.status]));
  }

  /** The live (not archived) episode holding a dedupe key, inside the caller's transaction. */
  async liveIdByDedupeKey(client: SqlExecutor, dedupeKey: string): Promise<string | null> {
    const { rows } = await client.query<{ id: string }>(
      `SELECT id FROM cyclium_episodes WHERE dedupe_key = $1 AND archived_at IS NULL`,
      [dedupeKey],
    );
    return rows[0]?.id ?? null;
  }

  /**
   * The live children of episodes `ids` that their cancel reaches (not detached), and theirs, to
   * any depth.
   */
  async attachedDescendants(ids: readonly string[]): Promise<string[]> {
    const { rows } = await this.database.sql.query<{ id: string }>(
      `WITH RECURSIVE tree (id) AS (
         SELECT unnest($1::uuid[])
         UNION
         SELECT c.id FROM cyclium_episodes c JOIN tree t
             ON (c.trigger_ref -> 'parent' ->> 'episodeId') = t.id::text
          WHERE c.trigger_ref ? 'parent'
            AND (c.trigger_ref -> 'parent' ->> 'detached') IS DISTINCT FROM 'true')
       SELECT t.id FROM tree t JOIN cyclium_episodes e ON e.id = t.id
        WHERE t.id <> ALL ($1::uuid[])
          AND e.status IN ('queued', 'throttled', 'deferred', 'waiting', 'running', 'blocked')`,
      [ids],
    );
    return rows.map((r) => r.id);
  }

  /** What became of an episode a request names: its status, or null when the row is gone. */
  async statusOf(client: SqlExecutor, id: string): Promise<EpisodeStatus | null> {
    const { rows } = await client.query<{ status: EpisodeStatus }>(
      `SELECT status FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    return rows[0]?.status ?? null;
  }

  /**
   * At the `integrity` cut-over, inside its transaction: signs the unsigned episodes in flight of
   * `scope` (written by nodes without the option), locked until the cut-over commits; returns how
   * many.
   */
  async signUnsigned(client: SqlExecutor, scope: CutoverScope): Promise<number> {
    const read = async (after: EpisodeRow | null, limit: number) => {
      const { rows } = await client.query(
        `SELECT * FROM cyclium_episodes e
          WHERE e.signature IS NULL AND ${IN_FLIGHT('e')}
            AND ${stackCovers('e.source_stack', '$1::text')}
            AND ${sameEnv('e.source_env', '$2::text')} AND ($3::uuid IS NULL OR e.id > $3::uuid)
          ORDER BY e.id LIMIT $4 FOR UPDATE`,
        [scope.stack, scope.env, after?.id ?? null, limit],
      );
      return rows.map(toEpisode);
    };
    const write = (page: EpisodeRow[]) =>
      client.query(
        `UPDATE cyclium_episodes e SET signature = v.signature
           FROM unnest($1::uuid[], $2::text[]) AS v (id, signature) WHERE e.id = v.id
             AND e.signature IS NULL`,
        [page.map((e) => e.id), page.map((e) => this.signatures.sign(e))],
      );
    return signInPages(read, write);
  }

  /**
   * Writes a row as given (the dedupe index refuses a live key); `started_at` defaults to the
   * database clock (rule 1) for a running row.
   */
  async seed(spec: SeedEpisode): Promise<EpisodeRow> {
    const statement = new Statement('episodes_seed');
    const { payload, ...columns } = spec;
    const row: EpisodeInsert = {
      ...columns,
      id: randomUUID(),
      triggerRef: JSON.stringify({ type: spec.triggerType, payload }),
      workflowInstanceId: null,
      workflowStepId: null,
      waits: spec.status === 'queued',
      insertBefore: null,
      signature: null,
      version: null,
    };
    statement.with(
      'ep',
      insertEpisodes(`(${episodeRow(statement, this.signatures.signed(row))})`, 'fail'),
    );
    const { rows } = await this.database.sql.query(statement.build('SELECT * FROM ep'));
    return toEpisode(rows[0] as Record<string, unknown>);
  }

  /**
   * Archives one finished episode now (what retention does after `archiveAfter`): its dedupe key is
   * free from the commit on. Answers what the row was before: `finished` (archived by this call),
   * `archived` already, `live`, or null when there is no such row.
   */
  async archive(id: string): Promise<'finished' | 'archived' | 'live' | null> {
    const statement = new Statement('episodes_archive_one');
    statement.with('due', `SELECT ${statement.param(id, 'uuid')} AS id`);
    statement.with('archived', EpisodeRetention.archive('due'));
    statement.with('checkpoints', EpisodeRetention.dropCheckpoints('archived'));
    const { rows } = await this.database.sql.query<{ was: 'finished' | 'archived' | 'live' }>(
      statement.build(`
        SELECT CASE WHEN e.archived_at IS NOT NULL THEN 'archived' WHEN e.finished_at IS NOT NULL
          THEN 'finished' ELSE 'live' END AS was
          FROM cyclium_episodes e JOIN due ON due.id = e.id`),
    );
    return rows[0]?.was ?? null;
  }

  /**
   * Cancels the episodes of `ids` that are not running (queued, deferred, or waiting out a retry's
   * backoff, a sleep or a wait), completing their requests still to run in the same statement;
   * returns them.
   */
  async cancelWaiting(
    ids: readonly string[],
    via: SqlExecutor = this.database.sql,
  ): Promise<EpisodeRow[]> {
    if (ids.length === 0) return [];
    const { rows } = await via.query(
      `WITH canceled AS (
         UPDATE cyclium_episodes
            SET status = 'canceled', finished_at = now(), updated_at = now(),
                error_class = 'canceled', cancel_requested_at = coalesce(cancel_requested_at, now())
          WHERE id = ANY($1::uuid[]) AND status IN ('queued', 'throttled', 'deferred', 'waiting')
          RETURNING *),
       requests AS (${this.requests.completeFor('canceled')})
       SELECT * FROM canceled`,
      [ids],
    );
    return rows.map(toEpisode);
  }

  /**
   * Asks the nodes running `ids` to stop them (the flag their next step write reads back); returns
   * the ids still running.
   */
  async requestCancel(
    ids: readonly string[],
    via: SqlExecutor = this.database.sql,
  ): Promise<string[]> {
    if (ids.length === 0) return [];
    const { rows } = await via.query<{ id: string }>(
      `UPDATE cyclium_episodes
        SET cancel_requested_at = coalesce(cancel_requested_at, now()), updated_at = now()
        WHERE id = ANY($1::uuid[]) AND status IN ('running', 'blocked') RETURNING id`,
      [ids],
    );
    return rows.map((r) => r.id);
  }

  /**
   * Whether a cancel was requested for the episode (a run that wrote no step reads it once, at its
   * end).
   */
  async cancelRequested(id: string): Promise<boolean> {
    const { rows } = await this.database.sql.query<{ requested: boolean }>(
      `SELECT cancel_requested_at IS NOT NULL AS requested FROM cyclium_episodes WHERE id = $1`,
      [id],
    );
    return rows[0]?.requested === true;
  }

  /**
   * Which of `keys` a live episode holds (the dedupe index's own condition): one statement for
   * many.
   */
  async heldDedupeKeys(keys: readonly string[]): Promise<Set<string>> {
    if (keys.length === 0) return new Set();
    const { rows } = await this.database.sql.query<{ dedupe_key: string }>(
      `SELECT dedupe_key FROM cyclium_episodes WHERE dedupe_key = ANY($1::text[]) AND ` +
        `archived_at IS NULL`,
      [keys],
    );
    return new Set(rows.map((r) => r.dedupe_key));
  }

  async get(id: string): Promise<EpisodeRow | null> {
    return oneEpisode(
      (await this.database.sql.query(`SELECT * FROM cyclium_episodes WHERE id = $1`, [id])).rows,
    );
  }

  async getMany(ids: readonly string[]): Promise<EpisodeRow[]> {
    if (ids.length === 0) return [];
    return (
      await this.database.sql.query(`SELECT * FROM cyclium_episodes WHERE id = ANY($1::uuid[])`, [
        ids,
      ])
    ).rows.map(toEpisode);
  }

  /** Newest first, by keyset; returns one row more than asked when there is a next page. */
  async page(query: EpisodePage): Promise<Array<{ episode: EpisodeRow; cursorAt: string }>> {
    const [afterAt, afterId] = query.after ?? [null, null];
    const { rows } = await this.database.sql.query(
      // The cursor keeps inserted_at as the database prints it: a JS Date would drop the
      // microseconds and skip rows inserted within the same millisecond.
      `SELECT *, inserted_at::text AS cursor_at FROM cyclium_episodes
        WHERE ($1::text IS NULL OR actor_id = $1) AND ($2::text IS NULL OR status = $2)
          AND ($3::timestamptz IS NULL OR (inserted_at, id) < ($3::timestamptz, $4::uuid))
          AND (NOT $6::boolean OR source_stack IS NOT DISTINCT FROM $7)
          AND (NOT $8::boolean OR source_env IS NOT DISTINCT FROM $9)
          AND ($10::text IS NULL OR (trigger_type = 'event' AND trigger_ref ->> 'eventId' = $10))
          AND ($11::text IS NULL OR dedupe_key = $11)
        ORDER BY inserted_at DESC, id DESC
        LIMIT $5`,
      [
        query.actorId ?? null,
        query.status ?? null,
        afterAt,
        afterId,
        query.limit + 1,
        query.sourceStack !== undefined,
        query.sourceStack ?? null,
        query.sourceEnv !== undefined,
        query.sourceEnv ?? null,
        query.eventId ?? null,
        query.dedupeKey ?? null,
      ],
    );
    return rows.map((r: Record<string, unknown>) => ({
      episode: toEpisode(r),
      cursorAt: r.cursor_at as string,
    }));
  }
}
