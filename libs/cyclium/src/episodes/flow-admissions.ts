import { Inject, Injectable } from '@nestjs/common';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { claimKeyOf } from '../claims/claim-keys.js';
import type { EpisodeRow } from './episode-context.interface.js';
import {
  batchedAcquire,
  beginColumns,
  queryBegin,
  type AcquireMany,
} from './episode-statements.js';
import { KEY_OF_ROW } from './queued-begins.js';
import { toEpisode } from './episode-store.js';
import type { FlowLimits } from './flow-limits.js';

/** Which expectation an admission serves, in which env, and how many rows it may start. */
export interface AdmissionRequest {
  actorId: string;
  expectationId: string;
  env: string | null;
  limits: FlowLimits;
  max: number;
  /** The versions this node's code runs (runnableVersions): others' pinned rows stay throttled. */
  versions: string[];
}

/** An episode an admission moved to running on this node, with its claim. */
export interface Admitted {
  episode: EpisodeRow;
  grant: AcquireResult;
  /** It has a journal (a wake-up, a retry): the run resumes from it. */
  resumed: boolean;
}

/**
 * What an admission started, and, when a rate window held rows back, how long until it frees
 * (null: nothing is held back by a window). `busy`: a claim was, and nothing was written.
 */
export type Admission = { admitted: Admitted[]; retryMs: number | null } | 'busy';

/** One admission's rows as the function returns them, before any claim. */
export interface AdmittedRows {
  rows: Array<{ episode: EpisodeRow; resumed: boolean }>;
  retryMs: number | null;
}

/**
 * The function's call, its parameters added to `statement`. With `after` (a CTE that inserts
 * rows), the call waits for that insert to finish (its `max` reads the CTE) and, reading a snapshot
 * of its own, sees the rows inserted; with `when` as well (a boolean expression), it admits only
 * when that holds (otherwise its `max` is 0, and it returns at once).
 */
export function admitCall(
  statement: Statement,
  request: AdmissionRequest,
  owner: string,
  after?: string,
  when = 'true',
): string {
  const p = (value: unknown, cast: string) => statement.param(value, cast);
  const { limits } = request;
  const max = after
    ? `CASE WHEN (SELECT count(*) FROM ${after}) >= 0 AND ${when} THEN ${p(request.max, 'int')}
            ELSE 0 END`
    : p(request.max, 'int');
  return `cyclium_flow_admit(${p(request.actorId, 'text')}, ${p(request.expectationId, 'text')},
            ${p(request.env, 'text')}, ${owner}, ${max},
            ${p(limits.limit, 'int')}, ${p(limits.total, 'int')}, ${p(limits.rate, 'int')},
            ${p(limits.periodMs, 'double precision')}, ${p(request.versions, 'text[]')})`;
}

/**
 * The one way an episode of a limited expectation (`concurrency`, `rateLimit`) becomes running:
 * cyclium_flow_admit (see its migration) moves the expectation's `throttled` rows that its limits
 * allow to running on this node under an advisory lock per expectation and env, and this takes
 * their claims in the same statement, as QueuedBegins does for a queue: the limit counts rows,
 * never a node's memory, so a holder killed mid-run keeps its slot until its episode ends or is
 * recovered, and a takeover, a drain or a restart of the whole cluster moves no count.
 */
@Injectable()
export class FlowAdmissions {
  private acquireMany: AcquireMany | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * True when an admission and its claims are one statement here (claims on and joined, no
   * `episode.started`); otherwise admitWithin admits one row at a time inside a transaction that
   * takes its claim (EpisodeRunner.beginAdmitted).
   */
  get inOneStatement(): boolean {
    if (this.acquireMany === undefined)
      this.acquireMany = batchedAcquire(this.claims, this.options);
    return this.acquireMany !== null;
  }

  /**
   * Whether the expectation has a throttled row this node may start, read once every admission in
   * flight has committed (cyclium_flow_backlog): a look that finds none admits nothing, and need
   * not take the admission's lock.
   */
  async backlog(request: AdmissionRequest): Promise<boolean> {
    const statement = new Statement('flow_backlog');
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    const { rows } = await this.database.sql.query<{ backlog: boolean }>(
      statement.build(
        `SELECT cyclium_flow_backlog(${p(request.actorId, 'text')}, ` +
          `${p(request.expectationId, 'text')}, ${p(request.env, 'text')}, ` +
          `${p(request.versions, 'text[]')}) AS backlog`,
      ),
    );
    return rows[0]?.backlog === true;
  }

  /** Admits up to `request.max` rows with their claims, in one statement (inOneStatement). */
  async admit(request: AdmissionRequest): Promise<Admission> {
    const statement = new Statement('flow_admit');
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    const owner = p(this.identity.name(), 'text');
    statement.with('adm', `SELECT * FROM ${admitCall(statement, request, owner)}`);
    statement.with(
      'ep',
      `SELECT (a.episode).*, a.resumed AS flow_resumed FROM adm a WHERE (a.episode).id IS NOT NULL`,
    );
    statement.with('began', `SELECT ${KEY_OF_ROW} AS key FROM ep e`);
    const acquire = this.acquireMany as AcquireMany;
    const leaseSeconds = p(this.claims.leaseSeconds, 'double precision');
    for (const [name, body] of acquire({ input: 'began', owner, leaseSeconds }))
      statement.with(name, body);
    const sentAt = performance.now();
    // One row at least, so the rate window's wait comes back when nothing was admitted.
    const rows = await queryBegin(
      this.database.sql,
      statement.build(`
        SELECT ${beginColumns(statement, 'c.key IS NULL')}, w.retry_ms AS flow_retry_ms
          FROM (SELECT max(retry_ms) AS retry_ms FROM adm) w
          LEFT JOIN ep e ON true
          LEFT JOIN claim c ON c.key = ${KEY_OF_ROW}
         ORDER BY e.queued_at, e.id`),
    );
    if (rows === 'busy') return 'busy';
    const admitted = rows
      .filter((row) => row.id !== null)
      .map((row) => {
        const episode = toEpisode(row);
        return {
          episode,
          grant: this.claims.grantOf(row, claimKeyOf(episode), sentAt),
          resumed: row.flow_resumed === true,
        };
      });
    return { admitted, retryMs: retryOf(rows[0]?.flow_retry_ms) };
  }

  /**
   * Admits up to `request.max` rows inside the caller's transaction on `client`, without claims
   * (the caller takes them in the same transaction).
   */
  async admitWithin(client: SqlExecutor, request: AdmissionRequest): Promise<AdmittedRows> {
    const statement = new Statement('flow_admit_within');
    const owner = statement.param(this.identity.name(), 'text');
    const { rows } = await client.query(
      statement.build(
        `SELECT a.resumed AS flow_resumed, a.retry_ms AS flow_retry_ms, (a.episode).*
           FROM ${admitCall(statement, request, owner)} a`,
      ),
    );
    const admitted = rows.filter((row: Record<string, unknown>) => row.id !== null);
    const held = rows.find((row: Record<string, unknown>) => row.id === null) as
      Record<string, unknown> | undefined;
    return {
      rows: admitted.map((row: Record<string, unknown>) => ({
        episode: toEpisode(row),
        resumed: row.flow_resumed === true,
      })),
      retryMs: retryOf(held?.flow_retry_ms),
    };
  }
}

function retryOf(value: unknown): number | null {
  return value === null || value === undefined ? null : Math.ceil(Number(value));
}
