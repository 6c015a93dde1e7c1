import { Injectable } from '@nestjs/common';
import type { QueryRunner } from 'typeorm';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { HostTransactions } from '../database/host-transactions.service.js';
import type { Ownership } from './episode-statements.js';
import { OwnedWrites, type WriteScope } from './owned-writes.js';
import type {
  StepRecord,
  TransactionStep,
  TransactionStepOutcome,
} from './step-ports.interface.js';
import { encodeStepResult } from './step-result.js';
import { StepWrites } from './step-writes.js';

const INT4_MAX = 2_147_483_647;

/**
 * `ep.transaction`: the host's writes, the step's journal row and checkpoint, and the proof that
 * this run still owns the episode at its fence, in one transaction on the library's DataSource.
 * Either all of it commits or none of it: a committed step is replayed from its checkpoint and
 * never runs again; one that did not commit runs again, whole. The proof is the step write's own
 * (StepWrites.writeWithin), sent last, so the transaction costs the host's statements plus BEGIN,
 * one statement and COMMIT. A stale holder's proof fails and its writes roll back.
 */
@Injectable()
export class TransactionSteps {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly transactions: HostTransactions,
    private readonly steps: StepWrites,
    private readonly writes: OwnedWrites,
  ) {}

  run(
    scope: WriteScope,
    ownership: Ownership,
    step: TransactionStep,
  ): Promise<TransactionStepOutcome> {
    // The attempt whose COMMIT was sent: if its answer was lost, it may have committed.
    let committing: { record: StepRecord; done: TransactionStepOutcome } | undefined;
    const attempt = async (): Promise<TransactionStepOutcome> => {
      committing = undefined;
      const runner = this.database.get().createQueryRunner();
      try {
        await runner.connect();
        await runner.startTransaction();
        const started = performance.now();
        const result = await step.run(runner.manager);
        const durationMs = performance.now() - started;
        const record: StepRecord = {
          stepNo: step.stepNo,
          journalNo: step.journalNo,
          name: step.name,
          resultJson: encodeStepResult(step.name, result),
          durationMs: Math.min(Math.round(durationMs), INT4_MAX),
        };
        step.check();
        const client = await this.transactions.executor(runner, `transaction "${step.name}"`);
        const outcome = await this.steps.writeWithin(client, scope.episodeId, ownership, record);
        if (outcome === 'not_owner') {
          await runner.rollbackTransaction();
          return { outcome, result, durationMs };
        }
        committing = { record, done: { outcome, result, durationMs } };
        await runner.commitTransaction();
        return committing.done;
      } catch (error) {
        await rollBack(runner);
        throw error;
      } finally {
        await runner.release();
      }
    };
    const again = async (): Promise<TransactionStepOutcome> => {
      if (committing) {
        const { record, done } = committing;
        // Not owned any more: committed or not, the run stops and the next owner replays.
        const found = await this.steps.confirm(scope.episodeId, ownership, record);
        if (found !== null) return { ...done, outcome: found };
      }
      return attempt();
    };
    return this.writes.transaction(
      scope,
      `transaction step ${step.stepNo} ("${step.name}")`,
      attempt,
      again,
    );
  }
}

/**
 * Ends a failed attempt's transaction, if it is still open on a connection that answers: one that
 * broke is rolled back by the server.
 */
async function rollBack(runner: QueryRunner): Promise<void> {
  if (!runner.isTransactionActive || runner.isReleased) return;
  try {
    await runner.rollbackTransaction();
  } catch {
    // The connection is gone: nothing of the transaction committed.
  }
}
