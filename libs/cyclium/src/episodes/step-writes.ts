import { Injectable } from '@nestjs/common';
import type { QueryConfig } from 'pg';
import { createHash } from 'node:crypto';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared, type SqlExecutor } from '../sql/sql-executor.js';
import { errorCode } from '../sql/database-errors.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { STEP_CONFIRM, checkpointFields, stepWrite } from './episode-journal.js';
import type { Ownership } from './episode-statements.js';
import type { StepRecord, StepWriteOutcome } from './step-ports.interface.js';
import { BatchedWrites } from './batched-writes.js';
import { runningHere } from './running-here.js';

interface StepWrite {
  episodeId: string;
  ownership: Ownership;
  record: StepRecord;
}

interface StepRow {
  written: number;
  cancel_requested: boolean;
}

type StepStatement = (values: unknown[]) => QueryConfig;

/**
 * Who proves a write's claim: the adapter, for a batch (`batched`) or alone (`joined`); nobody in
 * the statement (`open`).
 */
type Proof = 'batched' | 'joined' | 'open';

/**
 * Every step write of this node, each one statement (episode-journal's `stepWrite`). With a claims
 * adapter that can lock many claims in one statement (the shipped one), the writes that arrive
 * while one is in flight leave together as one statement, group-committed as publishing is: each
 * row still commits only while its own claim is held at its fence, so a batch changes what a step
 * costs, not what it guarantees. A lone write goes out at once with its one claim proven by key
 * (the adapter's `owner`), from scalar parameters, which bind for less than arrays. A batch
 * that PostgreSQL refuses (a bad value, a deadlock) is written again one by one, so only the write
 * at fault fails. Claims off, or another adapter: each step is written alone, its claim proven by
 * the adapter's `owner` in the statement, or asked `owns()` first when its store is elsewhere; and
 * the episode row proves in the same statement that this node still runs it (runningHere), so with
 * claims off a run whose episode a sweep took writes nothing more.
 */
@Injectable()
export class StepWrites {
  // Steps need no order among episodes; a few batches at once keep both database cores busy at low
  // concurrency.
  private readonly batches = new BatchedWrites<StepWrite, StepWriteOutcome>(
    async (w) => (await this.send('joined', [w]))[0] as StepWriteOutcome,
    (items) => this.send('batched', items),
  );
  /** The statement of each proof, built at its first write (null: this adapter cannot batch). */
  private readonly texts = new Map<Proof, StepStatement | null>();

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly signer: RowSigner,
  ) {}

  async write(
    episodeId: string,
    ownership: Ownership,
    record: StepRecord,
  ): Promise<StepWriteOutcome> {
    if (ownership.fence !== null && this.statement('batched'))
      return this.batches.write({ episodeId, ownership, record });
    return this.writeWithin(this.database.sql, episodeId, ownership, record);
  }

  /**
   * One step written alone, on `client`: the pool, or inside a transaction step's transaction,
   * where the claim proof (claims on) holds the claim row until that transaction ends, so a
   * takeover waits for its commit and the new owner's run then finds the step journaled; claims
   * off, the checkpoint's unique key lets one run's step commit, whichever got there first.
   */
  async writeWithin(
    client: SqlExecutor,
    episodeId: string,
    ownership: Ownership,
    record: StepRecord,
  ): Promise<StepWriteOutcome> {
    const write = { episodeId, ownership, record };
    const joined = this.claims.inStatement().joined && ownership.fence !== null;
    // A custom adapter's store is not this database: ask it, then write (as strong as it allows).
    if (
      !joined &&
      ownership.fence !== null &&
      !(await this.claims.owns(ownership.key, ownership.owner, ownership.fence))
    )
      return 'not_owner';
    try {
      return (await this.send(joined ? 'joined' : 'open', [write], client))[0] as StepWriteOutcome;
    } catch (error) {
      // A sweep that took the episode as this write was under way journals its marker at the
      // position the write wanted (or another run committed this step first): the run lost the
      // episode, its write is refused, not its fault.
      if (errorCode(error) === '23505' && !(await this.runsHere(episodeId, ownership.owner)))
        return 'not_owner';
      throw error;
    }
  }

  /**
   * Whether the episode is still running on `owner` (see runningHere): a write that met a taken
   * position asks.
   */
  private async runsHere(episodeId: string, owner: string): Promise<boolean> {
    const { rows } = await this.database.sql.query<{ here: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM cyclium_episodes e WHERE e.id = $1 AND ` +
        `${runningHere('e', '$2::text')}) AS here`,
      [episodeId, owner],
    );
    return rows[0]?.here === true;
  }

  /**
   * After a write that may have committed without its answer reaching us: its outcome when it did
   * (or `not_owner` when the claim is gone either way), null when it did not and may be sent again.
   */
  async confirm(
    episodeId: string,
    ownership: Ownership,
    record: StepRecord,
  ): Promise<StepWriteOutcome | null> {
    const { rows } = await this.claims.fencedStatement<{
      owned: number;
      written: boolean;
      cancel_requested: boolean;
    }>(this.database.sql, ownership, STEP_CONFIRM, [episodeId, record.journalNo, record.name]);
    const row = rows[0];
    if (!row || row.owned !== 1) return 'not_owner';
    if (!row.written) return null;
    return row.cancel_requested ? 'cancel_requested' : 'written';
  }

  /** Named after its text: one name stands for one text on a pool, whichever adapter built it. */
  private statement(proof: Proof): StepStatement | null {
    if (!this.texts.has(proof)) {
      const text = this.text(proof);
      const name = `episodes_step_write_${proof === 'open' ? 'open' : 'fenced'}_${createHash(
        'sha256',
      )
        .update(text ?? '')
        .digest('hex')
        .slice(0, 12)}`;
      this.texts.set(proof, text === null ? null : prepared(name, text));
    }
    return this.texts.get(proof) ?? null;
  }

  private text(proof: Proof): string | null {
    const claims = proof === 'open' ? this.claims.openClaims() : this.claims.inStatement();
    if (proof === 'batched') {
      const ownerMany = claims.joined ? claims.fragments.ownerMany : undefined;
      return ownerMany ? stepWrite(ownerMany({ input: 'input' })) : null;
    }
    // A lone write: its one claim, as the adapter's `owner` proves it (or the open passthrough).
    const claim = claims.fragments.owner({
      key: '$1::text',
      owner: '$2::text',
      fence: '$3::bigint',
    });
    // Open: no claim in the statement, so the episode row proves it (a sweep may have taken it).
    const held =
      proof === 'open'
        ? `SELECT 1 FROM (${claim}) AS claim
            WHERE EXISTS (SELECT 1 FROM cyclium_episodes e WHERE e.id = $4::uuid
                            AND ${runningHere('e', '$2::text')})`
        : claim;
    return stepWrite('SELECT i.* FROM input i WHERE EXISTS (SELECT 1 FROM held)', held);
  }

  private async send(
    proof: Proof,
    items: StepWrite[],
    client: SqlExecutor = this.database.sql,
  ): Promise<StepWriteOutcome[]> {
    const statement = this.statement(proof) as StepStatement;
    if (proof !== 'batched') {
      const [{ episodeId, ownership, record }] = items as [StepWrite];
      const { rows } = await client.query<StepRow>(
        statement([
          ownership.key,
          ownership.owner,
          ownership.fence,
          episodeId,
          record.journalNo,
          record.name,
          record.resultJson,
          record.durationMs,
          record.stepNo,
          this.signatureOf(episodeId, record),
        ]),
      );
      return [outcomeOf(rows[0])];
    }
    const { rows } = await this.database.sql.query<StepRow>(
      statement([
        items.map((w) => w.ownership.key),
        items.map((w) => w.ownership.owner),
        items.map((w) => w.ownership.fence),
        items.map((w) => w.episodeId),
        items.map((w) => w.record.journalNo),
        items.map((w) => w.record.name),
        items.map((w) => w.record.resultJson),
        items.map((w) => w.record.durationMs),
        items.map((w) => w.record.stepNo),
        items.map((w) => this.signatureOf(w.episodeId, w.record)),
        items.length,
      ]),
    );
    return items.map((_, i) => outcomeOf(rows[i]));
  }

  /**
   * The checkpoint's signature (the `integrity` option), over the result as it will be read back.
   */
  private signatureOf(episodeId: string, record: StepRecord): string | null {
    if (!this.signer.enabled) return null;
    return this.signer.sign(
      'checkpoint',
      checkpointFields(episodeId, record.stepNo, record.name, JSON.parse(record.resultJson)),
    );
  }
}

function outcomeOf(row: StepRow | undefined): StepWriteOutcome {
  if (row?.written !== 1) return 'not_owner';
  return row.cancel_requested ? 'cancel_requested' : 'written';
}
