import { Injectable } from '@nestjs/common';
import { SweepRecords } from '../cluster/sweep-records.js';
import { errorMessage } from '../sql/database-errors.js';
import {
  WorkflowReconciler,
  type ReconcileOptions,
  type ReconcileResult,
} from '../workflows/workflow-reconciler.service.js';
import { RecoverySweep } from './recovery-sweep.service.js';
import type { LastSweep, SweepOptions, SweepResult } from './recovery-sweep.interface.js';

/**
 * Recovery's public face: sweeps (RecoverySweep) and workflow reconciliations run one after
 * another on a node, each with its own options, and the last of each is kept for health checks.
 */
@Injectable()
export class Recovery {
  private last: LastSweep | null = null;
  private lastReconciled: { at: Date; result: ReconcileResult } | null = null;
  /** Sweeps on one node run one after another, each with its own options. */
  private sweeps: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly sweeper: RecoverySweep,
    private readonly reconciler: WorkflowReconciler,
    private readonly records: SweepRecords,
  ) {}

  /**
   * Waits for a sweep or reconciliation in flight (the drain calls it, after the schedule stopped).
   */
  async stop(): Promise<void> {
    await this.sweeps;
  }

  /**
   * One pass over the given scope (default: this node's). Calls on one node queue behind each
   * other.
   */
  sweep(options: SweepOptions = {}): Promise<SweepResult> {
    const pass = this.sweeps
      .then(() => this.sweeper.run(options))
      .then(
        (result) => {
          this.last = { at: new Date(), result, error: null };
          void this.records.record(this.last);
          return result;
        },
        (error: unknown) => {
          this.last = { at: new Date(), result: null, error: errorMessage(error) };
          void this.records.record(this.last);
          throw error;
        },
      );
    this.sweeps = pass.catch(() => undefined);
    return pass;
  }

  /** The last sweep this node ran: when, and how it went. */
  lastSweep(): LastSweep | null {
    return this.last;
  }

  /**
   * Re-publishes the terminal event of every step episode that finished while no workflow engine
   * heard it, for the live instances in scope (default: this node's stack, rows without one
   * included, and its env strictly) of the workflows this node declares. Steps whose episodes are
   * still under way are skipped. RecoverySchedule runs it after each sweep on nodes whose engine is
   * on.
   */
  reconcileWorkflows(options: ReconcileOptions = {}): Promise<ReconcileResult> {
    const pass = this.sweeps.then(() => this.reconciler.reconcile(options));
    this.sweeps = pass.catch(() => undefined);
    return pass.then((result) => {
      this.lastReconciled = { at: new Date(), result };
      return result;
    });
  }

  /** The last reconciliation this node ran, if any. */
  lastReconcile(): { at: Date; result: ReconcileResult } | null {
    return this.lastReconciled;
  }
}
