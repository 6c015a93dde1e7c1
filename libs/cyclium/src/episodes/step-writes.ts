import { Injectable } from '@nestjs/common';
import type { QueryConfig } from 'pg';
import { createHash } from 'node:crypto';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared } from '../sql/sql-executor.js';
import { STEP_CONFIRM, STEP_WRITE, stepWriteMany } from './episode-journal.js';
import type { Ownership } from './episode-statements.js';
import type { StepRecord, StepWriteOutcome } from './running-episode.js';
import { BatchedWrites } from './batched-writes.js';

interface StepWrite {
  episodeId: string;
  ownership: Ownership;
  record: StepRecord;
}

interface StepRow {
  written: number;
  cancel_requested: boolean;
}

type ManyStatement = (values: unknown[]) => QueryConfig;

/**
 * Every step write of this node. With a claims adapter that can lock many claims in one statement
 * (the shipped one), the writes that arrive while one is in flight leave together as one
 * statement, group-committed as publishing is: each row still commits only while its own claim is
 * held at its fence, so a batch changes what a step costs, not what it guarantees. A lone write
 * goes out at once, alone. A batch that PostgreSQL refuses (a bad value, a deadlock) is written
 * again one by one, so only the write at fault fails. Claims off, or another adapter: each step
 * is written alone.
 */
@Injectable()
export class StepWrites {
  // Steps need no order among episodes; a few batches at once keep both database cores busy at low concurrency.
  private readonly batches = new BatchedWrites<StepWrite, StepWriteOutcome>(
    (w) => this.writeOne(w.episodeId, w.ownership, w.record),
    (items) => this.writeMany(items),
  );
  /** The batched statement, built at the first step (null: this adapter cannot batch). */
  private many: ManyStatement | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
  ) {}

  write(episodeId: string, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome> {
    if (ownership.fence === null || !this.manyStatement()) return this.writeOne(episodeId, ownership, record);
    return this.batches.write({ episodeId, ownership, record });
  }

  /**
   * After a write that may have committed without its answer reaching us: its outcome when it did
   * (or `not_owner` when the claim is gone either way), null when it did not and may be sent again.
   */
  async confirm(episodeId: string, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome | null> {
    const { rows } = await this.claims.fencedStatement<{ owned: number; written: boolean; cancel_requested: boolean }>(
      this.database.sql,
      ownership,
      STEP_CONFIRM,
      [episodeId, record.journalNo, record.name],
    );
    const row = rows[0];
    if (!row || row.owned !== 1) return 'not_owner';
    if (!row.written) return null;
    return row.cancel_requested ? 'cancel_requested' : 'written';
  }

  /** Named after its text: one name stands for one text on a pool, whichever adapter built it. */
  private manyStatement(): ManyStatement | null {
    if (this.many === undefined) {
      const claims = this.claims.inStatement();
      const ownerMany = claims.joined ? claims.fragments.ownerMany : undefined;
      const text = ownerMany ? stepWriteMany(ownerMany({ input: 'input' })) : null;
      this.many = text ? prepared(`episodes_step_write_many_${createHash('sha256').update(text).digest('hex').slice(0, 12)}`, text) : null;
    }
    return this.many;
  }

  private async writeMany(items: StepWrite[]): Promise<StepWriteOutcome[]> {
    const many = this.manyStatement() as ManyStatement;
    const { rows } = await this.database.sql.query<StepRow>(
      many([
        items.map((w) => w.ownership.key),
        items.map((w) => w.ownership.owner),
        items.map((w) => w.ownership.fence),
        items.map((w) => w.episodeId),
        items.map((w) => w.record.journalNo),
        items.map((w) => w.record.name),
        items.map((w) => w.record.resultJson),
        items.map((w) => w.record.durationMs),
        items.map((w) => w.record.stepNo),
      ]),
    );
    return items.map((_, i) => outcomeOf(rows[i]));
  }

  private async writeOne(episodeId: string, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome> {
    const { rows } = await this.claims.fencedStatement<StepRow>(this.database.sql, ownership, STEP_WRITE, [
      episodeId,
      record.journalNo,
      record.name,
      record.resultJson,
      record.durationMs,
      record.stepNo,
    ]);
    return outcomeOf(rows[0]);
  }
}

function outcomeOf(row: StepRow | undefined): StepWriteOutcome {
  if (row?.written !== 1) return 'not_owner';
  return row.cancel_requested ? 'cancel_requested' : 'written';
}
