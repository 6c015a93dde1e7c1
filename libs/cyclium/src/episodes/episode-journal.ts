import { Injectable } from '@nestjs/common';
import type { FencedStatement } from '../leases/claims-in-statement.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import { batchRows } from '../sql/batch-rows.js';
import { CycliumEpisodeStep } from '../entities/episode-step.entity.js';
import { rowMapper } from '../entities/row-mapper.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { TamperedRowError } from '../integrity/tampered-row.error.js';
import { sameEnv, stackCovers } from '../scope/scope-predicates.js';
import { signInPages, type CutoverScope } from '../integrity/unsigned-pages.js';
import { IN_FLIGHT } from './episode-signatures.js';
import { decodeStepResult, presentStepResult } from './step-result.js';

/** A journal row, its result as callers see it (see presentStepResult). */
const toStep = rowMapper(CycliumEpisodeStep, { resultRef: presentStepResult });

export interface Checkpoint {
  name: string;
  state: unknown;
}

/**
 * Whether a step write whose reply was lost committed: the journal row of that step at that
 * position. While the claim is held at this fence no other holder can have written a step there (a
 * previous holder's writes all came before this run read its next position; markers are
 * observations), so the row is this write's. Reads ownership and a pending cancel as the step write
 * does.
 */
export const STEP_CONFIRM: FencedStatement = {
  name: 'episodes_step_confirm',
  body: `
  SELECT (SELECT count(*)::int FROM owner) AS owned,
         EXISTS (SELECT 1 FROM cyclium_episode_steps
                  WHERE episode_id = $4 AND step_no = $5 AND kind = 'step'
                    AND name = $6) AS written,
         EXISTS (SELECT 1 FROM cyclium_episodes WHERE id = $4
                   AND cancel_requested_at IS NOT NULL) AS cancel_requested`,
};

/** The rows of a batch: one per element of the parameter arrays, numbered in order. */
const STEP_INPUT_MANY = batchRows(
  `$1::text[], $2::text[], $3::bigint[], $4::uuid[], $5::int[], $6::text[], $7::jsonb[],
   $8::int[], $9::int[], $10::text[]`,
  'i',
  'key, owner, fence, episode_id, journal_no, name, result, duration_ms, step_no, signature, n',
  '$11::int',
);

/** The row of a lone write, from scalar parameters in the same order: it plans as one row. */
const STEP_INPUT_ONE = `
    SELECT $1::text AS key, $2::text AS owner, $3::bigint AS fence, $4::uuid AS episode_id,
           $5::int AS journal_no, $6::text AS name,
           $7::jsonb AS result, $8::int AS duration_ms, $9::int AS step_no, $10::text AS signature,
           1::bigint AS n`;

/**
 * The step write, for one episode or several: one journal row and one checkpoint per row of
 * `input` that `owner` keeps, written only while its claim is owned, as one commit. `owner` is the
 * body of the CTE of the rows whose ownership holds (the claims adapter's `ownerMany` over `input`,
 * each row fenced on its own claim, exactly as alone); `held`, when given, is a CTE before it (the
 * claim of a lone write, proven by the adapter's `owner`). It also reads back whether a cancel was
 * requested, so a running episode learns of one with the round trip it makes anyway. One row comes
 * back per input row, in input order. Parameters: keys, owners, fences, episode ids, journal
 * positions, names, results, durations, step numbers, checkpoint signatures (arrays of one length;
 * a lone write, the one that comes with `held`, passes them as scalars), then a batch's length.
 */
export function stepWrite(owner: string, held?: string): string {
  return `
  WITH input AS (${held === undefined ? STEP_INPUT_MANY : STEP_INPUT_ONE}),${
    held === undefined
      ? ''
      : `
  held AS (${held}),`
  }
  owner AS (${owner}),
  journal AS (
    INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref, duration_ms)
    SELECT episode_id, journal_no, 'step', name, result, duration_ms FROM owner RETURNING episode_id
  ),
  checkpoint AS (
    INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state, signature)
    SELECT episode_id, step_no, name, result, signature FROM owner RETURNING 1
  )
  SELECT (SELECT count(*)::int FROM journal j WHERE j.episode_id = i.episode_id) AS written,
         EXISTS (SELECT 1 FROM cyclium_episodes e WHERE e.id = i.episode_id
                   AND e.cancel_requested_at IS NOT NULL) AS cancel_requested
    FROM input i
   ORDER BY i.n`;
}

/**
 * Markers (`resumed`, `interrupted`, `orphaned`) take the next journal position. A peer can take
 * the same one at the same moment (a drain's marker and a sweep's `resumed`, say), so a marker
 * that meets a taken position is simply written at the next one: the journal never collides and
 * no marker is lost. Returns the episodes that got their marker.
 */
const MARK = prepared(
  'episodes_mark',
  `
  INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
  SELECT m.id, coalesce((SELECT max(j.step_no) FROM cyclium_episode_steps j
                         WHERE j.episode_id = m.id), 0) + 1,
         'observation', $2, $3::jsonb
    FROM unnest($1::uuid[]) AS m (id)
  ON CONFLICT (episode_id, step_no) DO NOTHING
  RETURNING episode_id`,
);

const MARK_ATTEMPTS = 5;

/**
 * Part of the statement that moves an episode back to running (a wake-up taken, a restart out of
 * its wait for a slot): the marker `woken` for each episode of the CTE `episodes` (column `id`)
 * that has a journal, naming the node `node` (a SQL text expression). Recovery measures quiet from
 * the newest journal row, so without it the run would inherit the quiet time of its wait and look
 * orphaned from its first moment. A fresh run needs none (its start is new) and must find
 * position 1 free. No other run writes the journal at that moment (the old one lost the episode:
 * the owner check of its writes refuses them), so the position is free.
 */
export function wokenMarker(episodes: string, node: string): string {
  return `
  INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref)
  SELECT w.id, last.step_no + 1, 'observation', 'woken',
         jsonb_build_object('event', 'woken', 'node', ${node})
    FROM ${episodes} w
   CROSS JOIN LATERAL (SELECT max(j.step_no) AS step_no FROM cyclium_episode_steps j
                       WHERE j.episode_id = w.id) last
   WHERE last.step_no IS NOT NULL
  ON CONFLICT (episode_id, step_no) DO NOTHING
  RETURNING episode_id`;
}

/** What a checkpoint's signature covers: its episode, position, step name and stored result. */
export function checkpointFields(
  episodeId: string,
  stepNo: number,
  name: string,
  stored: unknown,
): unknown[] {
  return [episodeId, stepNo, name, stored];
}

/** Every statement on cyclium_episode_steps and cyclium_episode_checkpoints. */
@Injectable()
export class EpisodeJournal {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly signer: RowSigner,
  ) {}

  /**
   * Appends the marker `name` (`result_ref.event` = name) to each episode; on `via` inside a
   * transaction, or on the pool.
   */
  async mark(
    ids: readonly string[],
    name: string,
    detail: Record<string, unknown>,
    via: SqlExecutor = this.database.sql,
  ): Promise<string[]> {
    const ref = JSON.stringify({ event: name, ...detail });
    const marked: string[] = [];
    let missing = [...ids];
    for (let attempt = 0; attempt < MARK_ATTEMPTS && missing.length > 0; attempt++) {
      const { rows } = await via.query<{ episode_id: string }>(MARK([missing, name, ref]));
      const done = new Set(rows.map((r) => r.episode_id));
      marked.push(...done);
      missing = missing.filter((id) => !done.has(id));
    }
    return marked;
  }

  /**
   * Checkpointed step results by step number, for a resumed run. With `integrity` on, a row whose
   * signature does not hold for this episode (edited, or copied from another; unsigned, once the
   * cut-over is recorded: RowSigner.accepts) is TamperedRowError.
   */
  async checkpoints(id: string): Promise<Map<number, Checkpoint>> {
    const read = async () =>
      (
        await this.database.sql.query<{
          checkpoint_no: number;
          phase: string;
          state: unknown;
          signature: string | null;
        }>(
          `SELECT checkpoint_no, phase, state, signature FROM cyclium_episode_checkpoints WHERE ` +
            `episode_id = $1 ORDER BY checkpoint_no`,
          [id],
        )
      ).rows;
    type Row = Awaited<ReturnType<typeof read>>[number];
    const accepted = (r: Row) => {
      const fields = checkpointFields(id, r.checkpoint_no, r.phase, r.state);
      return this.signer.accepts('checkpoint', fields, r.signature);
    };
    let rows = await read();
    let tampered = rows.find((r) => !accepted(r));
    // Read before a cut-over this node has seen since: a second read judges the rows as they are.
    if (tampered && this.signer.mayBeSignedSince(tampered.signature)) {
      rows = await read();
      tampered = rows.find((r) => !accepted(r));
    }
    if (tampered)
      throw new TamperedRowError(
        'cyclium_episode_checkpoints',
        `(${id}, ${tampered.checkpoint_no})`,
      );
    return new Map(
      rows.map((r) => [r.checkpoint_no, { name: r.phase, state: decodeStepResult(r.state) }]),
    );
  }

  /**
   * At the `integrity` cut-over, inside its transaction: signs the unsigned checkpoints of the
   * episodes in flight of `scope`, locked until the cut-over commits; returns how many.
   */
  async signUnsigned(client: SqlExecutor, scope: CutoverScope): Promise<number> {
    type Row = { episode_id: string; checkpoint_no: number; phase: string; state: unknown };
    const read = async (after: Row | null, limit: number) => {
      const { rows } = await client.query<Row>(
        `SELECT c.episode_id, c.checkpoint_no, c.phase, c.state
           FROM cyclium_episode_checkpoints c JOIN cyclium_episodes e ON e.id = c.episode_id
          WHERE c.signature IS NULL AND ${IN_FLIGHT('e')}
            AND ${stackCovers('e.source_stack', '$1::text')}
            AND ${sameEnv('e.source_env', '$2::text')}
            AND ($3::uuid IS NULL OR (c.episode_id, c.checkpoint_no) > ($3::uuid, $4::int))
          ORDER BY c.episode_id, c.checkpoint_no LIMIT $5 FOR UPDATE OF c`,
        [scope.stack, scope.env, after?.episode_id ?? null, after?.checkpoint_no ?? 0, limit],
      );
      return rows;
    };
    const sign = (r: Row) => {
      const fields = checkpointFields(r.episode_id, r.checkpoint_no, r.phase, r.state);
      return this.signer.sign('checkpoint', fields);
    };
    const write = (page: Row[]) =>
      client.query(
        `UPDATE cyclium_episode_checkpoints c SET signature = v.signature
           FROM unnest($1::uuid[], $2::int[], $3::text[]) AS v (episode_id, checkpoint_no,
                                                                signature)
          WHERE c.episode_id = v.episode_id AND c.checkpoint_no = v.checkpoint_no
            AND c.signature IS NULL`,
        [page.map((r) => r.episode_id), page.map((r) => r.checkpoint_no), page.map(sign)],
      );
    return signInPages(read, write);
  }

  /** The next free journal position (markers such as `resumed` take positions too). */
  async nextPosition(id: string): Promise<number> {
    const { rows } = await this.database.sql.query<{ next: number }>(
      `SELECT coalesce(max(step_no), 0)::int + 1 AS next FROM cyclium_episode_steps WHERE ` +
        `episode_id = $1`,
      [id],
    );
    return rows[0]?.next ?? 1;
  }

  /**
   * Part of a terminal statement: a finished episode keeps its journal, not its checkpoints (every
   * episode the SQL set `ids` names).
   */
  /**
   * The journal row of a run's last step, written by its end (see EpisodeEndings.converge): one per
   * row of `rows` (columns `episode_id`, `journal_no`, `name`, `result`, `duration_ms`), which
   * holds only ends that won: the run still owns its position there (no drain's marker took it,
   * see carriedStepHeld), so a row already at it fails the end rather than hide the step.
   */
  lastStepFragment(rows: string): string {
    return `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name, result_ref,
                                                duration_ms)
            SELECT episode_id, journal_no, 'step', name, result, duration_ms FROM (${rows}) s
            RETURNING 1`;
  }

  clearCheckpointsFragment(ids: string): string {
    return `DELETE FROM cyclium_episode_checkpoints WHERE episode_id IN (${ids}) RETURNING 1`;
  }

  /** The journal: steps and markers, in order. */
  async steps(id: string): Promise<CycliumEpisodeStep[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_episode_steps WHERE episode_id = $1 ORDER BY step_no`,
      [id],
    );
    return rows.map(toStep);
  }
}
