import { VersionMoves, type MoveVersion, type MoveVersionResult } from './version-moves.service.js';
import { Inject, Injectable } from '@nestjs/common';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { Dispatcher } from './dispatcher.service.js';
import { EpisodeRetry, type RetryResult } from './episode-retry.service.js';
import type { DispatchOptions, DispatchResult } from './dispatch-result.js';
import type { OnCommitResult } from './deferred-runner.service.js';
import type { HostTransaction } from '../transactions/host-transaction.js';
import { HostTransactions } from '../database/host-transactions.service.js';
import { EventOutbox } from '../bus/event-outbox.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from '../scope/scope-key.js';
import type { CycliumEpisodeStep } from '../entities/episode-step.entity.js';
import { EPISODE_STATUSES, type EpisodeStatus } from '../entities/episode.entity.js';
import type {
  EpisodeRow,
  EpisodeTrigger,
  RetryPolicy,
} from '../episodes/episode-context.interface.js';
import { CANCEL_EVENT } from '../episodes/episode-events.js';
import { EpisodeJournal } from '../episodes/episode-journal.js';
import { EpisodeRunner } from '../episodes/episode-runner.service.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { errorCode } from '../sql/database-errors.js';
import { isUuid } from '../sql/uuid.js';
import { InvalidListQueryError } from '../episodes/episode-errors.js';
import {
  checkTriggerInput,
  triggerDelay,
  triggerPriority,
  triggerRetry,
} from '../episodes/trigger-input.js';
import type { EpisodeOutcome, ResultOptions, SignalResult } from '../episodes/wait.types.js';
import { EpisodeResults } from '../waits/episode-results.service.js';
import { Signals } from '../waits/signals.service.js';
import { activeTraceContext } from '../primitives/trace-context.js';

/** Options of `Episodes.trigger`: dedupe key, when to run, retries, source stack and env. */
export interface TriggerOptions {
  /**
   * Makes the trigger idempotent: a second trigger with the same key is a duplicate until the first
   * episode is archived (`retention.archiveAfter` after it finished, a week by default, or at once
   * by `Episodes.archive`); after that the key starts a new episode. Scoped by env. A non-empty
   * string of at most 1,000 UTF-8 bytes with no NUL (InvalidTriggerError otherwise).
   */
  dedupeKey?: string;
  /**
   * Run this long after the trigger, by the database clock: the episode waits `deferred`, as a row
   * (with its trigger request, due then) that any node hosting the actor in full mode starts once
   * due, within one `triggerPollIntervalMs`, whichever nodes have stopped meanwhile.
   * `Episodes.cancel` before then and it never starts. Dedupe as for a run now. Default: the
   * expectation's `delayMs`, else 0 (now). A whole number of milliseconds >= 0.
   */
  delayMs?: number;
  /** Run at this time instead (not with `delayMs`); one in the past runs at the next poll. */
  runAt?: Date;
  /**
   * This episode's retry policy, over the expectation's `retry` (its `retryable` hook still
   * applies); `false` for no retries. Stored with the trigger, so whichever node runs an attempt
   * goes by it. Validated as `@Expectation({ retry })` is (InvalidTriggerError naming `retry`).
   */
  retry?: RetryPolicy | false;
  /**
   * For an expectation with `concurrency` or `rateLimit`: this episode's place among its throttled
   * ones (higher first, then oldest), over the expectation's `priority`. Stored with the trigger.
   * A whole number from -1,000,000 to 1,000,000 (InvalidTriggerError otherwise).
   */
  priority?: number;
  /** Default: this node's stack. An explicit null stamps the row with no stack. */
  sourceStack?: string | null;
  /** Default: this node's env. An explicit null targets the default env. */
  sourceEnv?: string | null;
}

/**
 * `Episodes.trigger` inside the host's open transaction: the episode, its trigger request and the
 * wake-up are written through `manager` and commit with the host's writes, or not at all.
 */
export interface TriggerInTransactionOptions extends TriggerOptions {
  /**
   * The host's open transaction (the EntityManager `dataSource.transaction` hands out, or a
   * QueryRunner after `startTransaction()`); HostTransactionError when it is not in one.
   */
  manager: HostTransaction;
}

/** The row `Episodes.create` inserts without running it (seeding, tests, acting on another env). */
export interface CreateEpisode {
  actorId: string;
  expectationId: string;
  triggerType?: EpisodeTrigger['type'];
  payload?: unknown;
  status?: EpisodeStatus;
  dedupeKey?: string | null;
  /** Default: the database's clock, for a running row. */
  startedAt?: Date | null;
  ownerNode?: string | null;
  maxAttempts?: number;
  sourceStack?: string | null;
  sourceEnv?: string | null;
}

/** Filters of `Episodes.list`. */
export interface ListEpisodes {
  actorId?: string;
  status?: EpisodeStatus;
  /** Only this stack's episodes; `null`: those stamped with no stack. Default: every stack. */
  sourceStack?: string | null;
  /** Only this env's episodes; `null`: the default env's. Default: every env. */
  sourceEnv?: string | null;
  /** Only the episodes this bus event started (the id `Bus.publish` returned). */
  eventId?: string;
  /** Only the episode (or, archived, episodes) stored under this dedupe key. */
  dedupeKey?: string;
  /** Default 50, at most 500. */
  limit?: number;
  /** `nextCursor` of the previous page. */
  cursor?: string;
}

/** What `Episodes.cancel` did: canceled it, asked its node to, found it finished, or found none. */
export type CancelResult = 'canceled' | 'requested' | 'finished' | 'not_found';

/**
 * What `Episodes.archive` did: archived it now, found it archived already, found it still live
 * (queued, running, …), or found no such episode.
 */
export type ArchiveResult = 'archived' | 'already_archived' | 'live' | 'not_found';

const pick = <T>(explicit: T | undefined, fallback: T): T =>
  explicit === undefined ? fallback : explicit;

/** Episodes for hosts and UIs: start one, read them, cancel one from any node. */
@Injectable()
export class Episodes {
  constructor(
    private readonly dispatcher: Dispatcher,
    private readonly registry: ActorRegistry,
    private readonly store: EpisodeStore,
    private readonly journal: EpisodeJournal,
    private readonly identity: NodeIdentity,
    private readonly runner: EpisodeRunner,
    private readonly events: EventOutbox,
    private readonly retries: EpisodeRetry,
    private readonly transactions: HostTransactions,
    private readonly signals: Signals,
    private readonly results: EpisodeResults,
    private readonly versionMoves: VersionMoves,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * Runs an expectation now: on this node (under its actor's concurrency limit) in full mode; in
   * trigger-only mode the episode is created and deferred to a full node (`deferred`, with the
   * request's id). With `delayMs` or `runAt` (or the expectation's `delayMs`) it is deferred in any
   * mode, `notBefore` its due time. A disabled node (or actor) refuses.
   */
  async trigger<P>(
    actorId: string,
    expectationId: string,
    payload: P,
    options: TriggerInTransactionOptions,
  ): Promise<OnCommitResult>;
  async trigger<P>(
    actorId: string,
    expectationId: string,
    payload: P,
    options?: TriggerOptions,
  ): Promise<DispatchResult>;
  /**
   * With `manager` (the host's open transaction): the episode (`deferred`), its request and the
   * wake-up are written through that transaction in one statement, and the answer is `on_commit`:
   * once the host commits, a node hosting the actor in full mode starts it (at its due time, with a
   * delay); a rollback leaves nothing. A live episode with the same dedupe key answers `duplicate`
   * without aborting the host's transaction.
   */
  async trigger<P>(
    actorId: string,
    expectationId: string,
    payload: P,
    options: TriggerOptions & { manager?: HostTransaction } = {},
  ): Promise<DispatchResult | OnCommitResult> {
    const expectation = this.registry.expectation(actorId, expectationId);
    if (!expectation)
      throw new ActorDefinitionError(
        `no actor ${actorId} with expectation ${expectationId} on this node`,
      );
    const what = `trigger ${actorId}.${expectationId}`;
    checkTriggerInput(what, payload, options.dedupeKey);
    const delay = triggerDelay(what, options);
    const retry = triggerRetry(what, options.retry);
    const priority = triggerPriority(what, options.priority);
    const sourceEnv = pick(options.sourceEnv, this.options.env);
    const traceContext = activeTraceContext();
    const trigger: EpisodeTrigger = {
      type: 'manual',
      payload,
      ...(retry === undefined ? {} : { retry }),
      ...(priority === undefined ? {} : { priority }),
      ...(traceContext === undefined ? {} : { traceContext }),
    };
    const dispatch: DispatchOptions = {
      dedupeKey: options.dedupeKey === undefined ? null : scopeKey(options.dedupeKey, sourceEnv),
      sourceStack: pick(options.sourceStack, this.options.stackSlug),
      sourceEnv,
      delay,
    };
    const result =
      options.manager === undefined
        ? await this.dispatcher.dispatch(expectation, trigger, dispatch)
        : await this.dispatcher.dispatchInHost(
            await this.transactions.executor(options.manager, `Episodes.${what}`),
            expectation,
            trigger,
            dispatch,
          );
    if (result.status === 'disabled')
      throw new ActorDefinitionError(
        `${actorId} is disabled on this node (mode disabled): nothing runs or is deferred here`,
      );
    return result;
  }

  /**
   * Inserts an episode row without running it (seeding, tests, acting on another env). Stack and
   * env default to this node's; an explicit value wins, `null` included.
   */
  async create(params: CreateEpisode): Promise<EpisodeRow> {
    const status = params.status ?? 'running';
    checkTriggerInput(
      `create ${params.actorId}.${params.expectationId}`,
      params.payload,
      params.dedupeKey,
    );
    return this.store.seed({
      actorId: params.actorId,
      expectationId: params.expectationId,
      triggerType: params.triggerType ?? 'manual',
      payload: params.payload ?? {},
      status,
      dedupeKey: params.dedupeKey ?? null,
      ownerNode: pick(params.ownerNode, status === 'running' ? this.identity.name() : null),
      maxAttempts: params.maxAttempts ?? 3,
      sourceStack: pick(params.sourceStack, this.options.stackSlug),
      sourceEnv: pick(params.sourceEnv, this.options.env),
      startedAt: params.startedAt ?? null,
    });
  }

  /** Null for an id that names no episode (not a UUID included). */
  async get(id: string): Promise<EpisodeRow | null> {
    return isUuid(id) ? this.store.get(id) : null;
  }

  /**
   * Newest first, by keyset pages. A limit that is not a whole number, a status no episode can
   * have, or a cursor this method did not hand out, fails with InvalidListQueryError (an empty
   * cursor means the first page).
   */
  async list(
    query: ListEpisodes = {},
  ): Promise<{ items: EpisodeRow[]; nextCursor: string | null }> {
    if (
      query.status !== undefined &&
      !(EPISODE_STATUSES as readonly string[]).includes(query.status)
    ) {
      throw new InvalidListQueryError(
        `episodes: status must be one of ${EPISODE_STATUSES.join(', ')} (got ` +
          `${JSON.stringify(query.status)})`,
      );
    }
    if (query.limit !== undefined && !Number.isInteger(query.limit)) {
      throw new InvalidListQueryError(
        `episodes: limit must be a whole number (got ${String(query.limit)})`,
      );
    }
    const limit = Math.min(Math.max(query.limit ?? 50, 1), 500);
    const after = query.cursor ? decodeCursor(query.cursor) : undefined;
    let rows: Awaited<ReturnType<EpisodeStore['page']>>;
    try {
      rows = await this.store.page({ ...query, limit, after });
    } catch (error) {
      // Only the cursor's timestamp is left for PostgreSQL to refuse (class 22, data exception).
      if (after && errorCode(error)?.startsWith('22')) throw invalidCursor(query.cursor as string);
      throw error;
    }
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const nextCursor =
      rows.length > limit && last
        ? Buffer.from(JSON.stringify([last.cursorAt, last.episode.id])).toString('base64url')
        : null;
    return { items: page.map((r) => r.episode), nextCursor };
  }

  /** The status of each of these episodes, in the order asked; absent ones left out. */
  async statusesOf(ids: readonly string[]): Promise<Array<[string, EpisodeStatus]>> {
    const found = await this.store.statusesOf(ids.filter(isUuid));
    return ids.flatMap((id) => {
      const status = found.get(id);
      return status ? [[id, status] as [string, EpisodeStatus]] : [];
    });
  }

  /** The journal: steps and markers, in order. */
  async steps(id: string): Promise<CycliumEpisodeStep[]> {
    return isUuid(id) ? this.journal.steps(id) : [];
  }

  /**
   * Moves the episodes of one expectation pinned to version `from` (not running on a live node:
   * waiting, deferred, throttled, queued, or orphaned) to `to`, each journaled `version_moved`,
   * when the host says the new code can take them: this node runs the expectation at `to` with
   * `accepts` listing `from` (else `not_accepted`, nothing moved). Nodes of `to` resume them, and
   * `from` can then be retired. Throws InvalidVersionMoveError for a malformed request.
   */
  moveVersion(request: MoveVersion): Promise<MoveVersionResult> {
    return this.versionMoves.move(request);
  }

  /**
   * Cancels from any node, any stack or env: an episode not yet started (queued, or deferred) is
   * canceled at once; a running one gets a durable cancel request on its row, which its node reads
   * back with its next step write (and hears over the bus at once, when it shares this node's
   * channel), and records `canceled` before that next step.
   */
  async cancel(id: string): Promise<CancelResult> {
    if (!isUuid(id)) return 'not_found';
    const result = await this.cancelOne(id);
    // Its children go with it (`ep.startChild`), unless started detached, to any depth.
    if (result === 'canceled' || result === 'requested')
      for (const child of await this.store.attachedDescendants([id])) await this.cancelOne(child);
    return result;
  }

  private async cancelOne(id: string): Promise<CancelResult> {
    if (await this.runner.cancelQueued(id)) return 'canceled';
    const [requested] = await this.store.requestCancel([id]);
    if (!requested) return (await this.store.get(id)) ? 'finished' : 'not_found';
    this.events.announce(CANCEL_EVENT, { episodeId: id });
    return 'requested';
  }

  /**
   * Sends signal `name` to an episode, from any node: stored durably, delivered to the episode's
   * next `ep.waitForSignal(name)` (one waiting now is woken, and resumes on a node hosting it),
   * each signal to one wait, once. With `manager`, written through the host's open transaction:
   * stored and delivered only if it commits. `finished` when the episode has ended (nothing is
   * stored), `not_found` when there is no such episode.
   */
  async signal(
    episodeId: string,
    name: string,
    payload?: unknown,
    options: { manager?: HostTransaction } = {},
  ): Promise<SignalResult> {
    const client =
      options.manager === undefined
        ? undefined
        : await this.transactions.executor(options.manager, `Episodes.signal("${name}")`);
    return this.signals.send(episodeId, name, payload, client);
  }

  /**
   * Awaits an episode's end from any node and answers its outcome with `Convergence.result`: at
   * once for one that ended, as soon as its terminal event arrives otherwise (the row is read
   * again at least every `triggerPollIntervalMs`). Null when there is no such episode;
   * EpisodeResultTimeoutError after `timeoutMs` (default 30 s).
   */
  result<R = unknown>(id: string, options?: ResultOptions): Promise<EpisodeOutcome<R> | null> {
    return this.results.result<R>(id, options);
  }

  /**
   * Archives a finished episode now rather than after `retention.archiveAfter`: its dedupe key is
   * free at once, so a trigger with the same key starts a new episode. A live episode is left as it
   * is (`live`): cancel it first. Retention deletes it later with the rest.
   */
  async archive(id: string): Promise<ArchiveResult> {
    const was = isUuid(id) ? await this.store.archive(id) : null;
    if (was === null) return 'not_found';
    return was === 'finished' ? 'archived' : was === 'archived' ? 'already_archived' : 'live';
  }

  /**
   * Runs a failed episode again. A `failed` one resumes from its journal, in place (`resumed`): it
   * waits `waiting`, due now, for any node hosting its actor, and the steps that completed return
   * their recorded results without running; its retry and crash-recovery counts start again. A
   * `partially_failed` one (its method returned) or an archived one (its checkpoints are gone) runs
   * as a new episode of the same expectation and trigger under the old dedupe key plus `:retry:<n>`
   * (`retried`), from the first step. One that failed as `tampered` is not run. The actor must be
   * declared on this node. `reason` (why an operator retries it) goes into the line logged when it
   * runs again, and into the journal's `retry` marker of one that resumes.
   */
  retry(id: string, options: { reason?: string } = {}): Promise<RetryResult> {
    return this.retries.retry(id, options.reason);
  }
}

function invalidCursor(cursor: string): InvalidListQueryError {
  return new InvalidListQueryError(
    `episodes: cursor ${JSON.stringify(cursor.slice(0, 100))} is not one Episodes.list returned; ` +
      `pass nextCursor unchanged`,
  );
}

/** The cursor is [inserted_at as the database printed it, id], base64url JSON. */
function decodeCursor(cursor: string): [string, string] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalidCursor(cursor);
  }
  if (!Array.isArray(parsed) || parsed.length !== 2) throw invalidCursor(cursor);
  const [at, id] = parsed as unknown[];
  if (typeof at !== 'string' || typeof id !== 'string' || !isUuid(id)) throw invalidCursor(cursor);
  return [at, id];
}
