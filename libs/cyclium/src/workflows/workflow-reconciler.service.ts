import { Inject, Injectable, Logger } from '@nestjs/common';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { lifecycleEvent, type LifecycleEventType } from '../episodes/episode-events.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { WorkflowInstanceStore, type WorkflowInstanceRow } from './workflow-instance-store.js';
import { WorkflowRegistry } from './workflow-registry.service.js';
import { isUuid } from '../sql/uuid.js';

/** Options of a workflow reconciliation pass. */
export interface ReconcileOptions {
  /** Default: this node's stack (unset: every stack). Instances with no stack match any stack. */
  sourceStack?: string | null;
  /** Default: this node's env; matched strictly (`null` is the default env). */
  sourceEnv?: string | null;
}

/** What one workflow reconciliation pass did. */
export interface ReconcileResult {
  /** Terminal events re-published for step episodes that had finished. */
  replayed: number;
  /** Steps whose episode is still under way (or waiting, or gone: logged). */
  skipped: number;
}

const PAGE = 200;

const EVENT_OF: Record<string, LifecycleEventType> = {
  done: 'episode.completed',
  partially_failed: 'episode.completed',
  failed: 'episode.failed',
  canceled: 'episode.canceled',
};

/**
 * Seed section 3.4: an engine that was not listening when a step's episode ended leaves the
 * instance running with the step still `running`. This walks live instances of the workflows this
 * node declares, in scope, reads the episode behind each running step and re-publishes the
 * terminal event of those that have finished; the engine applies it through its normal path, and
 * an event that was in fact applied already finds its step moved on and changes nothing.
 */
@Injectable()
export class WorkflowReconciler {
  private readonly logger = new Logger('CycliumRecovery');

  constructor(
    private readonly instances: WorkflowInstanceStore,
    private readonly episodes: EpisodeStore,
    private readonly registry: WorkflowRegistry,
    private readonly events: EventOutbox,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async reconcile(options: ReconcileOptions = {}): Promise<ReconcileResult> {
    const scope = {
      stack: options.sourceStack === undefined ? this.options.stackSlug : options.sourceStack,
      env: options.sourceEnv === undefined ? this.options.env : options.sourceEnv,
      workflowIds: this.registry.all().map((w) => w.id),
    };
    const result: ReconcileResult = { replayed: 0, skipped: 0 };
    let after: { insertedAt: string; id: string } | null = null;
    for (;;) {
      const page = await this.instances.liveInScope(scope, PAGE, after);
      const waiting = page.flatMap(({ instance }) => this.runningSteps(instance));
      const rows = new Map(
        (await this.episodes.getMany(waiting.map((w) => w.episodeId))).map((e) => [e.id, e]),
      );
      for (const { instance, stepId, episodeId } of waiting) {
        const episode = rows.get(episodeId);
        const type = episode ? EVENT_OF[episode.status] : undefined;
        if (!episode || !type) {
          if (!episode)
            this.logger.warn(
              `workflow instance ${instance.id}: step ${stepId} waits on episode ${episodeId}, ` +
                `which does not exist; left as it is`,
            );
          result.skipped++;
          continue;
        }
        await this.replay(type, episode);
        result.replayed++;
      }
      const last = page[page.length - 1];
      if (!last || page.length < PAGE) break;
      after = { insertedAt: last.cursorAt, id: last.instance.id };
    }
    if (result.replayed > 0)
      this.logger.log(
        `reconciled workflows: replayed ${result.replayed} terminal event(s), ${result.skipped} ` +
          `step(s) still running`,
      );
    this.telemetry.emit('recovery.reconcile', { ...result });
    return result;
  }

  /**
   * The steps still marked running; a row whose states are not what the engine writes is skipped
   * with its id.
   */
  private runningSteps(
    instance: WorkflowInstanceRow,
  ): Array<{ instance: WorkflowInstanceRow; stepId: string; episodeId: string }> {
    const states = instance.stepStates as unknown;
    if (typeof states !== 'object' || states === null || Array.isArray(states)) {
      this.logger.warn(`workflow instance ${instance.id}: step_states is not an object; skipped`);
      return [];
    }
    return Object.entries(
      states as Record<string, { status?: unknown; episodeId?: unknown }>,
    ).flatMap(([stepId, state]) => {
      if (state?.status !== 'running') return [];
      if (!isUuid(state.episodeId)) {
        this.logger.warn(
          `workflow instance ${instance.id}: step ${stepId} is running without a valid episode ` +
            `id; skipped`,
        );
        return [];
      }
      return [{ instance, stepId, episodeId: state.episodeId }];
    });
  }

  private async replay(type: LifecycleEventType, episode: EpisodeRow): Promise<void> {
    const status = episode.status as 'done' | 'partially_failed' | 'failed' | 'canceled';
    const event = lifecycleEvent(type, episode, status, this.identity.name(), {
      errorClass: episode.errorClass ?? undefined,
      replayed: true,
    });
    await this.events.publish(event.type, event.payload);
  }
}
