import { randomUUID } from 'node:crypto';
import type { QueryConfig } from 'pg';
import { Inject, Injectable } from '@nestjs/common';
import { EventOutbox, type OutgoingEvent } from '../bus/event-outbox.service.js';
import type { AcquireResult, ClaimFragments } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { errorMessage } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Statement } from '../sql/statement.js';
import { Findings } from '../findings/findings.service.js';
import type { FindingAction } from '../findings/finding-action.interface.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import type { OutputProposal } from '../outputs/output-proposal.interface.js';
import { Outputs, toOutput } from '../outputs/outputs.service.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { lifecycleEvent } from './episode-events.js';
import { EpisodeJournal } from './episode-journal.js';
import { EpisodeStore } from './episode-store.js';
import { isFresh, type NewEpisode } from './episode-inserts.js';
import {
  claimFailureOf,
  finishEpisode,
  type TerminalOutcome,
  resultJsonOf,
  carriedStepHeld,
} from './terminal-writes.js';
import { runningHere } from './running-here.js';
import type { StepRecord } from './step-ports.interface.js';
import { FlowQuiet } from './flow-quiet.js';
import { claimKeyOf, isLibraryKey } from '../claims/claim-keys.js';
import { finishedState } from '../claims/claim-sql.js';
import { noClaimRow, rowHolds } from '../claims/row-claim-sql.js';
import { KEYED_RUNNING } from '../sql/keyed-status.js';

/**
 * Who must own what for a write to count: the episode's claim key, this node, the fence it holds.
 */
export interface Ownership {
  key: string;
  owner: string;
  fence: number | null;
}

export type BeginOutcome =
  | { status: 'started'; episode: EpisodeRow; grant: AcquireResult }
  | { status: 'duplicate' }
  | { status: 'busy' };

export interface EndOutcome {
  terminal: TerminalOutcome;
  findings?: readonly FindingAction[];
  outputs?: readonly OutputProposal[];
  /** The terminal lifecycle event, committed with the status. */
  event: OutgoingEvent;
  /**
   * The run's last step, journaled by the end (a converged end only): the end then writes nothing
   * when a cancel is pending or a drain stamped the run (carriedStepHeld), so the run stops as it
   * would have after that step's own write.
   */
  lastStep?: StepRecord;
}

/** The text the busy guard fails with (an integer cast of it), recognised to answer busy. */
const BUSY = 'cyclium: the claim is busy';

/**
 * The text an end fails with when it finished its claim but the episode's row refused the end (an
 * integer cast of it): nothing is written, as when the claim refuses it.
 */
const TORN = 'cyclium: the end was refused by its episode';

export interface BeginRow {
  fence: string | null;
  attempt: number | null;
  lease_until: Date | null;
  stolen_from: string | null;
  id: string | null;
  [column: string]: unknown;
}

/**
 * The state changes of an episode's life as one round trip each (rule 4 inside every one of them):
 *
 * - begin: the row is inserted (the dedupe index decides), the claim is taken by the insert that
 *   won (and `episode.started` written, when enabled) — or nothing stays, when the key is a
 *   duplicate or the claim busy;
 * - end: ownership at the fence (holding the claim row), findings, outputs, the terminal status,
 *   the checkpoints cleared, the claim finished and the terminal event — all or nothing, and only
 *   while the claim is still this node's.
 *
 * Each room contributes the fragment for its own table (see Statement). A claims adapter that
 * cannot join the statement (its store is elsewhere) is asked `owns()` first and finished after
 * commit; a bus that is not durable publishes after commit.
 */
@Injectable()
export class EpisodeStatements {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeStore,
    private readonly journal: EpisodeJournal,
    private readonly claims: WorkClaims,
    private readonly findings: Findings,
    private readonly outputs: Outputs,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly flowQuiet: FlowQuiet,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** True when `begin` is one statement here (claims off, or an adapter that joins statements). */
  get beginsInOneStatement(): boolean {
    return !this.claims.enabled || this.claims.inStatement().joined;
  }

  /** Begin in one statement; use only when `beginsInOneStatement`. */
  async begin(spec: NewEpisode): Promise<BeginOutcome> {
    const id = randomUUID();
    const key = claimKeyOf({ id, dedupeKey: spec.dedupeKey });
    const me = this.identity.name();
    const claims = this.claims.inStatement();
    // Without a dedupe key, the episode's row and claim are new: nothing to skip or take over.
    const fresh = isFresh(spec);
    // With one of the library's own, the row takes the claim unless the claim table has the key.
    const rowFirst =
      !fresh && isLibraryKey(spec.trigger.type) && claims.fragments.episodeRows === true;
    const statement = new Statement(
      `begin_${claims.shape}${fresh ? '_fresh' : rowFirst ? '_row_first' : ''}`,
    );
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const owner = p(me, 'text');
    const leaseSeconds = p(this.claims.leaseSeconds, 'double precision');
    // The dedupe index decides first; only the insert that won takes the claim.
    const begun = this.store.beginFragment(
      statement,
      id,
      spec,
      fresh && claims.fragments.episodeRows === true
        ? { owner, leaseSeconds }
        : rowFirst
          ? { owner, leaseSeconds, when: noClaimRow('i.key') }
          : undefined,
    );
    statement.with('ep', begun.body);
    const acquire = claims.fragments.acquire({
      key: p(key, 'text'),
      owner,
      leaseSeconds,
      // A begin has none: a constant, not a parameter a fragment may leave unread.
      workType: 'NULL::text',
      when: 'EXISTS (SELECT 1 FROM ep)',
      fresh,
      ...(rowFirst ? { inRow: 'true' } : {}),
    });
    for (const [name, body] of acquire) statement.with(name, body);
    const started = lifecycleEvent(
      'episode.started',
      {
        ...spec,
        id,
        workflowInstanceId: spec.workflowInstanceId ?? null,
        workflowStepId: spec.workflowStepId ?? null,
      },
      'running',
      me,
    );
    // Opt-in (it costs a fifth of an episode's throughput); nobody waits on it, so it rides along
    // with the next wake-up.
    const event = this.options.startedEvents
      ? this.events.fragment(
          statement,
          [started],
          'EXISTS (SELECT 1 FROM ep) AND EXISTS (SELECT 1 FROM claim)',
          { wake: false },
        )
      : { body: null, announce: () => undefined };
    if (event.body) statement.with('started', event.body);

    const sentAt = performance.now();
    const rows = await queryBegin(
      this.database.sql,
      statement.build(`
        SELECT ${beginColumns(statement, 'NOT EXISTS (SELECT 1 FROM claim)')}
          FROM (SELECT 1) one LEFT JOIN ep e ON true LEFT JOIN claim c ON e.id IS NOT NULL`),
    );
    if (rows === 'busy') {
      this.claims.grantOf(
        { fence: null, attempt: null, lease_until: null, stolen_from: null },
        key,
        sentAt,
      );
      return { status: 'busy' };
    }
    const row = rows[0] as BeginRow;
    if (row.id === null) return { status: 'duplicate' };
    const grant = this.claims.grantOf(row, key, sentAt);
    event.announce();
    return { status: 'started', episode: begun.episode(row), grant };
  }

  /**
   * The end of a run, in one statement: null when the claim (or the running row) was no longer
   * this node's, and then nothing was written. Returns the outputs this episode won, to deliver.
   */
  async end(
    episode: EpisodeRow,
    ownership: Ownership,
    outcome: EndOutcome,
  ): Promise<CycliumOutput[] | null> {
    const claims = this.claims.inStatement();
    const joined = claims.joined && ownership.fence !== null;
    if (
      !joined &&
      ownership.fence !== null &&
      !(await this.claims.owns(ownership.key, ownership.owner, ownership.fence))
    )
      return null;

    const statement = new Statement(`end_${joined ? 'joined' : 'open'}`);
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const refs = {
      key: p(ownership.key, 'text'),
      owner: p(ownership.owner, 'text'),
      fence: p(ownership.fence, 'bigint'),
    };
    const { terminal } = outcome;
    const failure = claimFailureOf(terminal);
    const id = p(episode.id, 'uuid');
    const carried = outcome.lastStep ? carriedStepHeld('e') : undefined;
    // Joined, the claim's finish is the proof when the adapter can make it one (finishHeld): one
    // write of the claim row instead of a lock and then a write. It finishes the claim only while
    // the episode can end, as read by this statement; should the row change before the episode's
    // own update locks it (a cancel, a drain's stamp), `torn` fails the statement, which then
    // writes nothing, as a refused end does.
    const finishHeld = joined ? claims.fragments.finishHeld : undefined;
    // The row may hold the claim alone (a new episode's): then no claim-table row finishes, and the
    // episode's own update is the proof, checked on the row as it is once locked. Where the table
    // holds it, the row mirrors it, so the same check holds; the table's finish comes first (its
    // row, then the episode's: the order a takeover and its mirror lock them in).
    const rowClaims = joined && claims.fragments.episodeRows === true;
    const claimWrite = finishHeld && rowClaims ? 'claim_table' : 'owner';
    statement.with(
      claimWrite,
      finishHeld
        ? finishHeld({
            ...refs,
            failure: p(failure, 'text'),
            when:
              `EXISTS (SELECT 1 FROM cyclium_episodes e WHERE e.id = ${id} ` +
              `AND e.status = ${KEYED_RUNNING}${carried ? ` AND ${carried}` : ''})`,
          })
        : (joined ? claims : this.claims.openClaims()).fragments.owner(refs),
    );
    if (claimWrite !== 'owner') statement.with('owner', `SELECT count(*) FROM ${claimWrite}`);
    const classification =
      terminal.classification === undefined ? null : JSON.stringify(terminal.classification);
    statement.with(
      'ep',
      finishEpisode(
        id,
        {
          status: p(terminal.status, 'text'),
          summary: p(terminal.summary ?? null, 'text'),
          classification: p(classification, 'jsonb'),
          errorClass: p(terminal.errorClass ?? null, 'text'),
          detail: p(terminal.detail ?? null, 'text'),
          result: p(resultJsonOf(terminal), 'jsonb'),
          claim: rowClaims ? { ...refs, state: finishedState(p(failure, 'text')) } : undefined,
        },
        // Open: no claim in the statement, so the episode row proves it (a sweep may have taken
        // it).
        [
          joined ? undefined : runningHere('e', refs.owner),
          rowClaims ? rowHolds('e', refs) : undefined,
          carried,
        ]
          .filter((held) => held !== undefined)
          .join(' AND ') || undefined,
      ),
    );
    const won = 'EXISTS (SELECT 1 FROM ep)';
    const step = outcome.lastStep;
    if (step)
      statement.with(
        'last_step',
        this.journal.lastStepFragment(
          `SELECT id AS episode_id, ${p(step.journalNo, 'int')} AS journal_no,
                  ${p(step.name, 'text')} AS name, ${p(step.resultJson, 'jsonb')} AS result,
                  ${p(step.durationMs, 'int')} AS duration_ms FROM ep`,
        ),
      );
    const converged = terminal.status === 'done' || terminal.status === 'partially_failed';
    if (converged)
      statement.with('checkpoints', this.journal.clearCheckpointsFragment('SELECT id FROM ep'));
    for (const [name, body] of this.findings.fragments(
      statement,
      episode,
      outcome.findings ?? [],
      won,
    ))
      statement.with(name, body);
    const proposals = outcome.outputs ?? [];
    if (proposals.length > 0)
      statement.with('outputs', this.outputs.fragment(statement, episode, proposals, won));
    if (joined && !finishHeld)
      statement.with(
        'claim_finished',
        claims.fragments.finish({ ...refs, failure: p(failure, 'text'), when: won }),
      );
    const event = this.events.fragment(statement, [outcome.event], won);
    if (event.body) statement.with('terminal_event', event.body);
    const quiet = this.flowQuiet.ask(statement, [episode]);
    if (quiet) statement.with('flow_quiet', quiet.body);
    const asked = (quiet ? `, ${quiet.column}` : '') + event.columns;
    // The cast reads the claim's write, so the planner cannot fold it into an error of its own.
    const torn = finishHeld
      ? `, CASE WHEN NOT EXISTS (SELECT 1 FROM ep) AND EXISTS (SELECT 1 FROM ${claimWrite}) ` +
        `THEN (${p(TORN, 'text')} || (SELECT count(*) FROM ${claimWrite})::text)::int END AS torn`
      : '';

    const startedAt = performance.now();
    let rows: Array<{ won: number } & Record<string, unknown>>;
    try {
      ({ rows } = await this.database.sql.query<{ won: number } & Record<string, unknown>>(
        statement.build(
          proposals.length > 0
            ? `SELECT w.n AS won${torn ? ', w.torn' : ''}, o.*${asked} ` +
                `FROM (SELECT count(*)::int AS n${torn} FROM ep) w ` +
                `LEFT JOIN outputs o ON true`
            : `SELECT count(*)::int AS won${asked}${torn} FROM ep`,
        ),
      ));
    } catch (error) {
      if (errorMessage(error).includes(TORN)) return null;
      throw error;
    }
    if (rows[0]?.won !== 1) return null;
    quiet?.answered(rows[0], [episode]);
    if (ownership.fence !== null) {
      if (joined) this.claims.finished(ownership.key, ownership.fence, failure !== null, startedAt);
      // A custom adapter's store is not this database: finish there, as strong as it allows.
      else if (failure === null)
        await this.claims.complete(ownership.key, ownership.owner, ownership.fence);
      else await this.claims.fail(ownership.key, ownership.owner, failure, ownership.fence);
    }
    event.announce(rows[0]);
    return rows.filter((r) => r.id !== null && r.id !== undefined).map(toOutput);
  }
}

export type AcquireMany = NonNullable<ClaimFragments['acquireMany']>;

/**
 * The claims fragment begins batched in one statement need; null when this setup cannot batch them
 * (claims off, an adapter that cannot join, or `startedEvents`).
 */
export function batchedAcquire(
  claims: WorkClaims,
  options: ResolvedCycliumOptions,
): AcquireMany | null {
  const inStatement = claims.inStatement();
  const acquireMany = inStatement.fragments.acquireMany;
  return claims.enabled && inStatement.joined && acquireMany && !options.startedEvents
    ? acquireMany
    : null;
}

/**
 * Claims the keys of the CTE `began` (column `key`) for `owner` and runs the statement, selecting
 * each begin's columns (see beginColumns) from `from`, which joins the episode rows as `e` and the
 * claims as `c`: the rows, or `busy`, and when it was sent (a claim's deadline counts from there).
 */
export async function claimBegun(
  sql: SqlExecutor,
  statement: Statement,
  acquire: AcquireMany,
  claims: { owner: string; leaseSeconds: string; fresh?: boolean; inRow?: string },
  from: string,
): Promise<{ rows: BeginRow[] | 'busy'; sentAt: number }> {
  for (const [name, body] of acquire({ input: 'began', ...claims })) statement.with(name, body);
  const sentAt = performance.now();
  const rows = await queryBegin(
    sql,
    statement.build(`SELECT ${beginColumns(statement, 'c.key IS NULL')} ${from}`),
  );
  return { rows, sentAt };
}

/**
 * Runs a begin statement: its rows, or `busy` when its busy guard failed it (and nothing was
 * written).
 */
export async function queryBegin(
  sql: SqlExecutor,
  query: QueryConfig,
): Promise<BeginRow[] | 'busy'> {
  try {
    return (await sql.query<BeginRow>(query)).rows;
  } catch (error) {
    if (errorMessage(error).includes(BUSY)) return 'busy';
    throw error;
  }
}

/**
 * What a begin answers per episode, from `e` (the inserted row, or none: a duplicate) and `c` (its
 * claim): the grant's columns and the row. Inserted but the claim is busy (`claimMissing`: a live
 * lease on a key no live episode had): the statement must write nothing, so it fails on purpose,
 * rolling the insert back with it. The cast reads the inserted row, so the planner cannot fold it
 * into an error of its own.
 */
export function beginColumns(statement: Statement, claimMissing: string): string {
  const busy = statement.param(BUSY, 'text');
  return `c.fence::text, c.attempt, c.lease_until, c.stolen_from, e.*,
          CASE WHEN e.id IS NOT NULL AND ${claimMissing}
            THEN (${busy} || e.id::text)::int END AS busy`;
}
