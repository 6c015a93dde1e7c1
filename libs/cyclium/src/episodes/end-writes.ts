import { Injectable } from '@nestjs/common';
import { EventOutbox } from '../bus/event-outbox.service.js';
import type { ClaimFragments } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import { batchRows } from '../sql/batch-rows.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import { BatchedWrites } from './batched-writes.js';
import type { EpisodeStatus } from '../entities/episode.entity.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { EpisodeJournal } from './episode-journal.js';
import { EpisodeStatements, type EndOutcome, type Ownership } from './episode-statements.js';
import { claimFailureOf, finishEpisodes, resultJsonOf } from './terminal-writes.js';
import { runningHere } from './running-here.js';
import { FlowQuiet } from './flow-quiet.js';

interface EndWrite {
  episode: EpisodeRow;
  ownership: Ownership & { fence: number };
  outcome: EndOutcome;
}

type BatchFragments = Required<Pick<ClaimFragments, 'ownerMany' | 'finishMany'>>;

/**
 * Every terminal write of this node. Outcomes with nothing but a status and an event (no findings,
 * no outputs) are one statement for one end or many: those that arrive while another terminal write
 * is in flight leave together, group-committed as step writes are, each row proving its own claim
 * at its fence (the claims locked in key order, the episodes in id order); its status, checkpoint
 * cleanup, claim completion and terminal event are written only when that proof held, so a stale
 * holder in a batch writes nothing while the others commit. A lone write goes out at once as
 * EpisodeStatements.end, its claim proven by key: the batch's joins over its input cost twice the
 * planning for one row. A batch PostgreSQL refuses is written again one by one, so only the write
 * at fault fails. Everything else (findings, outputs, claims off, an adapter or bus that cannot
 * batch) is EpisodeStatements.end, which shares the terminal write (terminal-writes).
 */
@Injectable()
export class EndWrites {
  private readonly batches = new BatchedWrites<EndWrite, boolean>(
    async (w) => (await this.statements.end(w.episode, w.ownership, w.outcome)) !== null,
    (items) => this.endMany(items),
  );
  /**
   * The claims fragments a batch needs, resolved at the first end (null: this setup cannot batch).
   */
  private fragments: BatchFragments | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly statements: EpisodeStatements,
    private readonly journal: EpisodeJournal,
    private readonly claims: WorkClaims,
    private readonly events: EventOutbox,
    private readonly flowQuiet: FlowQuiet,
  ) {}

  /** The end of a run, as EpisodeStatements.end answers it: null when nothing was written. */
  async end(
    episode: EpisodeRow,
    ownership: Ownership,
    outcome: EndOutcome,
  ): Promise<CycliumOutput[] | null> {
    const { fence } = ownership;
    if (
      fence === null ||
      (outcome.findings?.length ?? 0) > 0 ||
      (outcome.outputs?.length ?? 0) > 0 ||
      !this.batchFragments()
    ) {
      return this.statements.end(episode, ownership, outcome);
    }
    return (await this.batches.write({ episode, ownership: { ...ownership, fence }, outcome }))
      ? []
      : null;
  }

  /**
   * After an end that may have committed without its answer reaching us: `ended` when it did
   * (this owner finished the claim at this fence and the episode has this status), `lost` when it
   * did not and the claim is no longer this node's, `owned` when it did not and may be sent again.
   * Without claims in the statement, the episode row decides: this status, this node its owner.
   */
  async confirm(
    episodeId: string,
    ownership: Ownership,
    status: EpisodeStatus,
  ): Promise<'ended' | 'owned' | 'lost'> {
    const claims = this.claims.inStatement();
    const finished =
      claims.joined && ownership.fence !== null ? claims.fragments.finished : undefined;
    const statement = new Statement(`end_confirm_${finished ? 'claim' : 'row'}`);
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const refs = {
      key: p(ownership.key, 'text'),
      owner: p(ownership.owner, 'text'),
      fence: p(ownership.fence, 'bigint'),
    };
    const fragments =
      claims.joined && ownership.fence !== null
        ? claims.fragments
        : this.claims.openClaims().fragments;
    statement.with('owner', fragments.owner(refs));
    if (finished) statement.with('finished', finished(refs));
    const id = p(episodeId, 'uuid');
    const row = `SELECT 1 FROM cyclium_episodes WHERE id = ${id} AND status = ${p(status, 'text')}
                    ${finished ? '' : `AND owner_node IS NOT DISTINCT FROM ${refs.owner}`}`;
    // Open: the episode row proves ownership, as in the end itself.
    const here =
      `SELECT 1 FROM cyclium_episodes e WHERE e.id = ${id} AND ` +
      `${runningHere('e', refs.owner)}`;
    const held = finished ? '' : `AND EXISTS (${here})`;
    const ended = `${finished ? 'EXISTS (SELECT 1 FROM finished) AND ' : ''}EXISTS (${row})`;
    const { rows } = await this.database.sql.query<{ ended: boolean; owned: boolean }>(
      statement.build(`SELECT ${ended} AS ended, EXISTS (SELECT 1 FROM owner) ${held} AS owned`),
    );
    if (rows[0]?.ended) return 'ended';
    if (!rows[0]?.owned) return 'lost';
    // A custom adapter's store is not this database: ask it, as the end itself does.
    if (
      !claims.joined &&
      ownership.fence !== null &&
      !(await this.claims.owns(ownership.key, ownership.owner, ownership.fence))
    )
      return 'lost';
    return 'owned';
  }

  private batchFragments(): BatchFragments | null {
    if (this.fragments === undefined) {
      const claims = this.claims.inStatement();
      const { ownerMany, finishMany } = claims.fragments;
      this.fragments =
        claims.joined && ownerMany && finishMany && this.events.batches
          ? { ownerMany, finishMany }
          : null;
    }
    return this.fragments;
  }

  private async endMany(items: EndWrite[]): Promise<boolean[]> {
    const { ownerMany, finishMany } = this.batchFragments() as BatchFragments;
    // Named as the lone joined end it also is.
    const statement = new Statement('end_joined_many');
    const terminal = items.map((w) => w.outcome.terminal);
    const steps = items.map((w) => w.outcome.lastStep);
    const input = statement.arrays([
      [items.map((w) => w.ownership.key), 'text[]'],
      [items.map((w) => w.ownership.owner), 'text[]'],
      [items.map((w) => w.ownership.fence), 'bigint[]'],
      [items.map((w) => w.episode.id), 'uuid[]'],
      [terminal.map((t) => t.status), 'text[]'],
      [terminal.map((t) => t.summary ?? null), 'text[]'],
      [
        terminal.map((t) =>
          t.classification === undefined ? null : JSON.stringify(t.classification),
        ),
        'jsonb[]',
      ],
      [terminal.map((t) => t.errorClass ?? null), 'text[]'],
      [terminal.map((t) => t.detail ?? null), 'text[]'],
      [terminal.map(claimFailureOf), 'text[]'],
      [terminal.map(resultJsonOf), 'jsonb[]'],
      [steps.map((s) => s?.journalNo ?? null), 'int[]'],
      [steps.map((s) => s?.name ?? null), 'text[]'],
      [steps.map((s) => s?.resultJson ?? null), 'jsonb[]'],
      [steps.map((s) => s?.durationMs ?? null), 'int[]'],
    ]);
    const count = statement.param(items.length, 'int');
    statement.with(
      'input',
      batchRows(
        input,
        'i',
        `key, owner, fence, episode_id, status, summary, classification, error_class,
         error_detail, failure, result, step_journal_no, step_name, step_result, step_ms, n`,
        count,
      ),
    );
    statement.with('owner', ownerMany({ input: 'input' }));
    const rowClaims = this.claims.inStatement().fragments.episodeRows === true;
    for (const [name, body] of finishEpisodes('owner', count, rowClaims))
      statement.with(name, body);
    statement.with('won', `SELECT o.* FROM owner o JOIN ep ON ep.id = o.episode_id`);
    statement.with(
      'checkpoints',
      this.journal.clearCheckpointsFragment(
        `SELECT episode_id FROM won WHERE status IN ('done', 'partially_failed')`,
      ),
    );
    if (steps.some((step) => step !== undefined))
      statement.with(
        'last_step',
        this.journal.lastStepFragment(
          `SELECT episode_id, step_journal_no AS journal_no, step_name AS name,
                  step_result AS result, step_ms AS duration_ms
             FROM won WHERE step_journal_no IS NOT NULL`,
        ),
      );
    statement.with('claim_finished', finishMany({ input: 'won' }));
    const event = this.events.fragmentMany(
      statement,
      items.map((w) => w.outcome.event),
      `SELECT n FROM won`,
    );
    event.bodies.forEach((body, i) =>
      statement.with(i === 0 ? 'terminal_event' : `terminal_event_${i + 1}`, body),
    );
    const quiet = this.flowQuiet.ask(
      statement,
      items.map((w) => w.episode),
    );
    if (quiet) statement.with('flow_quiet', quiet.body);

    const startedAt = performance.now();
    const { rows } = await this.database.sql.query<{ won: boolean } & Record<string, unknown>>(
      statement.build(
        `SELECT EXISTS (SELECT 1 FROM won w WHERE w.n = i.n) AS won
                ${quiet ? `, ${quiet.column}` : ''}${event.columns}
           FROM input i ORDER BY i.n`,
      ),
    );
    const won = items.map((_, i) => rows[i]?.won === true);
    quiet?.answered(
      rows[0],
      items.filter((_, i) => won[i]).map((w) => w.episode),
    );
    const written: number[] = [];
    items.forEach((item, i) => {
      if (!won[i]) return;
      written.push(i + 1);
      this.claims.finished(
        item.ownership.key,
        item.ownership.fence,
        claimFailureOf(item.outcome.terminal) !== null,
        startedAt,
      );
    });
    event.announce(written, rows[0]);
    return won;
  }
}
