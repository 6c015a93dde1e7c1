import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorDefinitionsStore } from '../actors/actor-definitions.store.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { ActorSlots } from '../dispatch/actor-slots.service.js';
import { EventOutbox, type Announce } from '../bus/event-outbox.service.js';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { lifecycleEvent } from '../episodes/episode-events.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import { episodeLabel } from '../episodes/episode-log-lines.js';
import { EpisodeRecoveryStore } from '../episodes/episode-recovery-store.js';
import type {
  RecoveryPolicy,
  ResolvedCycliumOptions,
} from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { REQUEST_WAKE_EVENT } from '../dispatch/deferred-runner.service.js';
import { Mode } from '../dispatch/mode.service.js';
import { TriggerRequests } from '../dispatch/trigger-requests.service.js';
import { claimKeyOf } from '../claims/claim-keys.js';
import { isDatabaseUnavailable } from '../sql/database-errors.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { SkipReason, SweepOptions } from './recovery-sweep.interface.js';

/** Rolls a recovery transaction back (the claim it took included) and says why. */
class Skip extends Error {
  override readonly name = 'Skip';
  constructor(readonly reason: SkipReason) {
    super(reason);
  }
}

/** A recovery policy, or null when nothing here knows the episode's. */
type Policy = RecoveryPolicy | null;

/** What recovery decided for one candidate before touching it. */
interface Plan {
  candidate: EpisodeRow;
  hosted: boolean;
  policy: RecoveryPolicy;
  attempt: number;
  restart: boolean;
  defer: boolean;
  from: string;
}

/** How one candidate ended: acted on, or left (and why). */
export type TakeoverResult = 'restarted' | 'deferred' | 'failed' | SkipReason;

type Outcome =
  | { kind: 'restart'; episode: EpisodeRow; grant: AcquireResult }
  | { kind: 'deferred'; episode: EpisodeRow; announce: Announce }
  | { kind: 'failed'; episode: EpisodeRow; detail: string; announce: Announce };

/**
 * Takes orphaned episodes over, each exactly once across the cluster. For each, under its own
 * savepoint: takes its claim (a live holder means skip), takes the row with one conditional UPDATE,
 * and journals `resumed` — or fails it as `orphaned`, per policy and `maxAttempts`. A restart keeps
 * the claim: it is handed to this node's slots with its fence and renewed while it waits, so no
 * moment exists when a peer could take it again. Only expectations this node hosts are taken for a
 * restart; a failure may be applied anywhere.
 */
@Injectable()
export class EpisodeTakeover {
  private readonly logger = new Logger('CycliumRecovery');

  constructor(
    private readonly database: CycliumDataSource,
    private readonly store: EpisodeRecoveryStore,
    private readonly journal: EpisodeJournal,
    private readonly claims: WorkClaims,
    private readonly slots: ActorSlots,
    private readonly registry: ActorRegistry,
    private readonly definitions: ActorDefinitionsStore,
    private readonly telemetry: CycliumTelemetry,
    private readonly events: EventOutbox,
    private readonly mode: Mode,
    private readonly requests: TriggerRequests,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * Takes several candidates over in one transaction, each under a savepoint of its own: a
   * candidate that is busy, taken or fails rolls back alone, the others commit together, so a
   * burst of orphans costs a commit per batch, not per episode. Each is still claimed before its
   * row is taken (rule 6), and nothing is handed to the slots, announced or logged before the
   * commit. The database going away fails the whole batch (thrown); any other failure of one
   * candidate goes to `failed` and counts as `error`.
   */
  async recoverMany(
    candidates: readonly EpisodeRow[],
    me: string,
    options: SweepOptions,
    failed: (candidate: EpisodeRow, error: unknown) => void,
  ): Promise<TakeoverResult[]> {
    const results: TakeoverResult[] = [];
    const plans: Array<{ at: number; plan: Plan }> = [];
    for (const [at, candidate] of candidates.entries()) {
      const plan = await this.plan(candidate, options);
      if (plan) plans.push({ at, plan });
      else results[at] = 'not_hosted';
    }
    if (plans.length === 0) return results;
    const taken: Array<{ at: number; plan: Plan; outcome: Outcome; report: () => void }> = [];
    const busy: Array<() => void> = [];
    await this.database.transaction(async (client) => {
      for (const { at, plan } of plans) {
        // The claim's answer counts once it is known to stay: a takeover that finds the row taken
        // rolls its claim back.
        let report: () => void = () => undefined;
        await client.query('SAVEPOINT cyclium_takeover');
        try {
          const outcome = await this.takeWithin(
            client,
            plan,
            me,
            (reportClaim) => (report = reportClaim),
          );
          await client.query('RELEASE SAVEPOINT cyclium_takeover');
          taken.push({ at, plan, outcome, report });
        } catch (error) {
          if (isDatabaseUnavailable(error)) throw error;
          await client.query('ROLLBACK TO SAVEPOINT cyclium_takeover');
          if (error instanceof Skip && error.reason === 'busy') busy.push(report);
          if (error instanceof Skip) results[at] = error.reason;
          else {
            failed(plan.candidate, error);
            results[at] = 'error';
          }
        }
      }
    });
    for (const report of busy) report();
    for (const { at, plan, outcome, report } of taken) {
      report();
      results[at] = this.handOn(plan, outcome);
    }
    return results;
  }

  /**
   * What recovery would do with the candidate here; null when only a node that hosts (and runs) its
   * actor can.
   */
  private async plan(candidate: EpisodeRow, options: SweepOptions): Promise<Plan | null> {
    // The expectation, not only the actor: a release here may lack it (a rolling deploy).
    const hosted = this.slots.hosts(candidate.actorId, candidate.expectationId);
    const known = await this.policyFor(candidate, options.resolvePolicy);
    // This release of the actor lacks the expectation and no policy is recorded for it (this node's
    // own boot may have recorded the actor without it): a node of a release that has it decides.
    if (known === null && this.registry.get(candidate.actorId)) return null;
    const policy = known ?? 'fail';
    const attempt = candidate.attempts + 1;
    const restart = policy === 'restart' && attempt <= candidate.maxAttempts;
    const mode = this.mode.of(candidate.actorId);
    // Sweeping another stack's rows: restarts of actors hosted there go to that stack as requests.
    const otherStack =
      options.sourceStack !== undefined && options.sourceStack !== this.options.stackSlug;
    const defer = restart && ((hosted && mode === 'trigger_only') || (!hosted && otherStack));
    // Otherwise only a node that hosts (and runs) the actor can run it: leave the orphan to one.
    if (restart && !defer && (!hosted || mode !== 'full')) return null;
    return {
      candidate,
      hosted,
      policy,
      attempt,
      restart,
      defer,
      from: candidate.ownerNode ?? 'an unknown node',
    };
  }

  /**
   * Claims the candidate and takes its row inside the caller's transaction; Skip when either is
   * someone else's.
   */
  private async takeWithin(
    client: SqlExecutor,
    plan: Plan,
    me: string,
    claimed: (report: () => void) => void,
  ): Promise<Outcome> {
    const { candidate, hosted, policy, attempt, restart, defer, from } = plan;
    const key = claimKeyOf(candidate);
    const acquired = await this.claims.acquireWithinUnreported(client, key, me, {
      workType: 'recovery',
    });
    const grant = acquired.result;
    claimed(acquired.report);
    if (grant.status === 'busy') throw new Skip('busy'); // a live holder: never recover it
    const episode = await this.store.take(client, candidate, me);
    if (!episode) throw new Skip('taken');
    if (restart) {
      await this.journal.mark(
        [episode.id],
        'resumed',
        { attempt, node: me, from: candidate.phase ?? 'stale', lastOwner: from },
        client,
      );
      if (!defer) return { kind: 'restart', episode, grant };
      // Waits as deferred for a full node's poller, which takes it with a claim of its own.
      if (!(await this.store.deferRestart(client, episode.id))) throw new Skip('taken');
      await this.requests.insertWithin(
        client,
        episode.id,
        {
          actorId: episode.actorId,
          expectationId: episode.expectationId,
          sourceNode: me,
          sourceStack: episode.sourceStack,
          sourceEnv: episode.sourceEnv,
          opts: { resume: true },
          // Accepted work, due at once: it never expires.
          delayMs: 0,
        },
        episode.triggerRef,
      );
      await this.claims.completeWithin(
        client,
        key,
        me,
        grant.status === 'acquired' ? grant.claim.fence : null,
      );
      const announce = await this.events.within(client, [
        { type: REQUEST_WAKE_EVENT, payload: { node: me } },
      ]);
      return { kind: 'deferred', episode, announce };
    }
    const detail = [
      policy === 'restart'
        ? `orphaned: attempt ${attempt} is past max_attempts ${candidate.maxAttempts}`
        : 'orphaned: recovery policy is fail',
      `(last owned by ${from})`,
      hosted
        ? ''
        : `; ${candidate.actorId}.${candidate.expectationId} is not hosted on ${me}, policy from ` +
          `its recorded definition`,
    ]
      .join(' ')
      .trim();
    const fence = grant.status === 'acquired' ? grant.claim.fence : null;
    if (!(await this.store.failOrphaned(client, episode.id, detail))) throw new Skip('taken');
    await this.journal.mark([episode.id], 'orphaned', { node: me, lastOwner: from }, client);
    if ((await this.claims.failWithin(client, key, me, fence, detail)) !== 'ok')
      throw new Skip('taken');
    const announce = await this.events.within(client, [
      lifecycleEvent('episode.failed', episode, 'failed', me, { errorClass: 'orphaned' }),
    ]);
    return { kind: 'failed', episode, detail, announce };
  }

  /**
   * After the commit: a restart goes to this node's slots with its claim, a deferral or failure is
   * announced.
   */
  private handOn(
    { candidate, attempt, from }: Plan,
    outcome: Outcome,
  ): 'restarted' | 'deferred' | 'failed' {
    if (outcome.kind === 'deferred') {
      outcome.announce();
      this.logger.log(
        `recovery: deferred the restart of ${episodeLabel(candidate)} from ${from} ` +
          `(${this.why(candidate)}) to a full node: attempt ${attempt} of ${candidate.maxAttempts}`,
      );
      return 'deferred';
    }
    if (outcome.kind === 'failed') {
      outcome.announce();
      this.logger.warn(`recovery: ${episodeLabel(outcome.episode)} failed as ${outcome.detail}`);
      this.telemetry.emit('episode.failed', {
        ...this.describe(outcome.episode),
        errorClass: 'orphaned',
      });
      return 'failed';
    }
    const fence =
      outcome.grant.status === 'acquired' ? `fence ${outcome.grant.claim.fence}` : 'no claim';
    this.logger.log(
      `recovery: took over ${episodeLabel(candidate)} from ${from} (${this.why(candidate)}), ` +
        `${fence}: restarting, attempt ${attempt} of ${candidate.maxAttempts}`,
    );
    this.slots.resume(outcome.episode, outcome.grant);
    return 'restarted';
  }

  private why(candidate: EpisodeRow): string {
    return candidate.phase === 'interrupted' ? 'interrupted by a drain' : 'its journal went quiet';
  }

  private describe(episode: EpisodeRow) {
    return {
      episodeId: episode.id,
      actorId: episode.actorId,
      expectationId: episode.expectationId,
    };
  }

  /**
   * `resolvePolicy`, else the expectation's `recoveryPolicy` (`fail` when it declares none), else
   * the actor's stored definition; null when none of them knows.
   */
  private async policyFor(
    episode: EpisodeRow,
    resolve = this.options.recovery.resolvePolicy,
  ): Promise<Policy> {
    if (resolve) return resolve(episode);
    const expectation = this.registry.expectation(episode.actorId, episode.expectationId);
    if (expectation) return expectation.options.recoveryPolicy ?? 'fail';
    return this.definitions.recordedPolicy(episode);
  }
}
