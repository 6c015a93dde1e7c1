import { Injectable } from '@nestjs/common';
import type { QueryConfig } from 'pg';
import { createHash } from 'node:crypto';
import { GroupCommit, type Pending } from '../bus/group-commit.js';
import { WorkClaims } from '../claims/work-claims.service.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { isDatabaseUnavailable } from '../database/database-errors.js';
import { prepared } from '../database/sql-executor.js';
import { STEP_WRITE, stepWriteMany } from './episode-journal.js';
import type { Ownership } from './episode-statements.js';
import type { StepRecord, StepWriteOutcome } from './running-episode.js';

/** Batches a node keeps in flight at once: fewer than its episodes, so each batch still serves several. */
const IN_FLIGHT = 4;

interface StepWrite {
  episodeId: string;
  ownership: Ownership;
  record: StepRecord;
  outcome: StepWriteOutcome;
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
  private readonly batches = new GroupCommit<StepWrite>((batch) => this.send(batch), IN_FLIGHT);
  /** The batched statement, built at the first step (null: this adapter cannot batch). */
  private many: ManyStatement | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
  ) {}

  async write(episodeId: string, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome> {
    if (ownership.fence === null || !this.manyStatement()) return this.writeOne(episodeId, ownership, record);
    const item: StepWrite = { episodeId, ownership, record, outcome: 'not_owner' };
    await this.batches.add(item);
    return item.outcome;
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

  private async send(batch: Array<Pending<StepWrite>>): Promise<void> {
    const many = this.manyStatement() as ManyStatement;
    if (batch.length === 1) return this.sendOne(batch[0] as Pending<StepWrite>);
    const items = batch.map((pending) => pending.item);
    let rows: StepRow[];
    try {
      ({ rows } = await this.database.sql.query<StepRow>(
        many([
          items.map((w) => w.ownership.key),
          items.map((w) => w.ownership.owner),
          items.map((w) => w.ownership.fence),
          items.map((w) => w.episodeId),
          items.map((w) => w.record.journalNo),
          items.map((w) => w.record.name),
          items.map((w) => resultJson(w.record)),
          items.map((w) => w.record.durationMs),
          items.map((w) => w.record.stepNo),
        ]),
      ));
    } catch (error) {
      // Away is away for every write alike; anything else may be one write's fault.
      if (isDatabaseUnavailable(error)) throw error;
      await Promise.all(batch.map((pending) => this.sendOne(pending)));
      return;
    }
    batch.forEach((pending, i) => {
      pending.item.outcome = outcomeOf(rows[i]);
      pending.resolve();
    });
  }

  private async sendOne(pending: Pending<StepWrite>): Promise<void> {
    const { episodeId, ownership, record } = pending.item;
    try {
      pending.item.outcome = await this.writeOne(episodeId, ownership, record);
      pending.resolve();
    } catch (error) {
      pending.reject(error);
    }
  }

  private async writeOne(episodeId: string, ownership: Ownership, record: StepRecord): Promise<StepWriteOutcome> {
    const { rows } = await this.claims.fencedStatement<StepRow>(this.database.sql, ownership, STEP_WRITE, [
      episodeId,
      record.journalNo,
      record.name,
      resultJson(record),
      record.durationMs,
      record.stepNo,
    ]);
    return outcomeOf(rows[0]);
  }
}

function resultJson(record: StepRecord): string {
  return JSON.stringify({ v: record.result ?? null });
}

function outcomeOf(row: StepRow | undefined): StepWriteOutcome {
  if (row?.written !== 1) return 'not_owner';
  return row.cancel_requested ? 'cancel_requested' : 'written';
}
