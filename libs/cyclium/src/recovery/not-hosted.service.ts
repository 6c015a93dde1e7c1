import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { NodeRegistry } from '../cluster/node-registry.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import { episodeLabel } from '../episodes/episode-log-lines.js';
import {
  EpisodeRecoveryStore,
  RECOVERY_PAGE,
  type CandidateScope,
} from '../episodes/episode-recovery-store.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';

/**
 * One line per failed episode up to this many per actor and sweep, then one line with the rest's
 * count.
 */
const LINES_PER_ACTOR = 20;

/**
 * Ends the episodes no node will ever run: running or queued episodes of an expectation (actor and
 * expectation) that no live node of their stack and env has declared for
 * `recovery.notHostedGraceMs` (an actor or one of its expectations removed or renamed while its
 * episodes ran) while this node watched, beating, for as long, fail with
 * `error_class: 'not_hosted'`, their terminal event published, so a workflow waiting on one moves
 * on. Any node's sweep may do it: the rows belong to no live node, and the statement fails each row
 * once however many nodes sweep at the same time.
 */
@Injectable()
export class NotHostedEpisodes {
  private readonly logger = new Logger('CycliumRecovery');

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeRecoveryStore,
    private readonly journal: EpisodeJournal,
    private readonly registry: ActorRegistry,
    private readonly events: EventOutbox,
    private readonly telemetry: CycliumTelemetry,
    private readonly nodes: NodeRegistry,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** The grace period in force, or null when the option turns this off. */
  private graceMs(): number | null {
    const grace = this.options.recovery.notHostedGraceMs;
    // A node beating normally must never look as if it stopped declaring its actors.
    return grace === null ? null : Math.max(grace, 3 * this.options.nodeBeatIntervalMs);
  }

  /**
   * Fails batches until one comes back short or `deadline` (a performance.now() time) passed;
   * returns how many failed.
   */
  async sweep(
    scope: Pick<CandidateScope, 'stack' | 'env'>,
    me: string,
    deadline: number,
  ): Promise<number> {
    const graceMs = this.graceMs();
    const since = this.nodes.watchingSince();
    if (graceMs === null || since === null) return 0;
    // Its own last beat must be recent too: a gap its next beat has yet to notice (a freeze, an
    // outage) is no watch.
    const watcher = { node: me, since, gapMs: 3 * this.options.nodeBeatIntervalMs };
    const hosted = this.registry.hostedExpectations();
    const nobody = `no live node of its stack and env has declared`;
    const detail =
      `not_hosted: ${nobody} actor %s with expectation %s for ${graceMs} ms (last ` +
      `owned by %s)`;
    const byActor = new Map<string, number>();
    let failed = 0;
    for (;;) {
      const batch = await this.database.transaction(async (client) => {
        const episodes = await this.store.failNotHosted(
          client,
          scope,
          hosted,
          graceMs,
          detail,
          watcher,
        );
        await this.journal.mark(
          episodes.map((e) => e.id),
          'not_hosted',
          { node: me },
          client,
        );
        const announce = await this.events.within(
          client,
          episodes.map((e) =>
            lifecycleEvent('episode.failed', e, 'failed', me, { errorClass: 'not_hosted' }),
          ),
        );
        return { episodes, announce };
      });
      batch.announce();
      for (const episode of batch.episodes) {
        const count = (byActor.get(episode.actorId) ?? 0) + 1;
        byActor.set(episode.actorId, count);
        if (count <= LINES_PER_ACTOR) {
          const why = `${nobody} its expectation for ${graceMs} ms`;
          this.logger.warn(`recovery: ${episodeLabel(episode)} failed as not_hosted: ${why}`);
        }
        this.telemetry.emit('episode.failed', {
          episodeId: episode.id,
          actorId: episode.actorId,
          expectationId: episode.expectationId,
          errorClass: 'not_hosted',
        });
      }
      failed += batch.episodes.length;
      if (batch.episodes.length < RECOVERY_PAGE || performance.now() > deadline) break;
    }
    for (const [actor, count] of byActor) {
      if (count > LINES_PER_ACTOR) {
        this.logger.warn(
          `recovery: failed ${count} episode(s) of actor ${actor} as not_hosted, the first ` +
            `${LINES_PER_ACTOR} named above`,
        );
      }
    }
    return failed;
  }
}
