import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { OutageLog } from '../sql/database-errors.js';
import { Mode } from '../dispatch/mode.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { WorkflowEngine } from '../workflows/workflow-engine.service.js';
import { Recovery } from './recovery.service.js';

/**
 * Seed section 7, step 4, on every node: once the cluster settled (`recovery.settleMs`) sweep,
 * then reconcile the workflows (where the engine is on), then again every `recovery.intervalMs`.
 * A disabled node runs and defers nothing: it leaves orphans to the others. A pass that fails
 * (the database away, say) is logged once per outage and tried again at the next tick.
 */
@Injectable()
export class RecoverySchedule implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumRecovery');
  private readonly sweepOutage = new OutageLog(this.logger, 'recovery sweep');
  private readonly reconcileOutage = new OutageLog(this.logger, 'workflow reconciliation');
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly recovery: Recovery,
    private readonly engine: WorkflowEngine,
    private readonly mode: Mode,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onApplicationBootstrap(): void {
    const { onBoot, settleMs, intervalMs } = this.options.recovery;
    if (!onBoot) return;
    const next = (delay: number) => {
      const pass = async () => {
        if (this.mode.current !== 'disabled') {
          await this.quietly(this.sweepOutage, () => this.recovery.sweep());
          if (this.engine.advancing && this.timer !== undefined)
            await this.quietly(this.reconcileOutage, () => this.recovery.reconcileWorkflows());
        }
        if (intervalMs !== null && this.timer !== undefined) next(intervalMs);
      };
      // void: quietly() catches and logs every failure of a pass, so it never rejects.
      this.timer = setTimeout(() => void pass(), delay);
      this.timer.unref();
    };
    next(settleMs);
  }

  /**
   * No pass starts after this (the drain calls it first); one under way is Recovery.stop's to wait
   * for.
   */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async quietly(outage: OutageLog, pass: () => Promise<unknown>): Promise<void> {
    try {
      await pass();
      outage.succeeded();
    } catch (error) {
      outage.failed(error);
    }
  }
}
