import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import type { Ownership } from '../episodes/episode-statements.js';
import { toEpisode } from '../episodes/episode-store.js';
import { OwnedWrites, type WriteScope } from '../episodes/owned-writes.js';
import { RETRY_WAKE_UPS, type RetryWakeUps } from '../episodes/retry-wake-ups.interface.js';
import type {
  StepRecord,
  StepWriteOutcome,
  WaitStep,
  WaitStepOutcome,
} from '../episodes/step-ports.interface.js';
import { encodeStepResult } from '../episodes/step-result.js';
import { StepWrites } from '../episodes/step-writes.js';
import { CLEAR, LOCK_RUNNING, OUTCOMES, PARK, PARKED } from '../episodes/waiting-rows.js';
import { busChannel } from '../bus/bus-channel.js';
import { EventWaitStore } from './event-waits.store.js';
import { SignalStore } from './signal-store.js';
import type { ChildPending, EpisodeOutcome, WaitingFor } from '../episodes/wait.types.js';

/** A wait without a deadline: its wake-up is due this far ahead (about a century). */
const NEVER_MS = 100 * 365 * 24 * 3600 * 1000;

const TERMINAL = new Set(['done', 'partially_failed', 'failed', 'canceled']);

/** The step write of a satisfied wait found the claim gone: nothing of it may commit. */
class NotOwner extends Error {
  override readonly name = 'NotOwner';
}

/** What satisfies a wait, when something does. */
type Found = { done: true; result: unknown } | { done: false; timedOut: () => Promise<unknown> };

/**
 * The waits of a running episode (`ep.waitForSignal`, `ep.waitForEvent`, `ep.waitForChildren`),
 * each one transaction on the library's pool, fenced on the claim: the episode's row is locked
 * first (proving this node owns it), then what the wait wants is looked for. Found, or past its
 * deadline by the database clock: the step's journal row and checkpoint are written with the
 * result (a signal is marked delivered in the same transaction, so it is delivered once). Not
 * found: the episode leaves `running` for `waiting` with `waiting_for` saying what for, a wake-up
 * `scheduled` at the deadline (a century ahead without one), and its claim completed, so it holds
 * no slot and no claim and the orphan sweep does not see it. A signal, a matching event or the
 * last child's end moves that wake-up to now (their statements lock the same row, so each either
 * commits before the wait looks, or after the wait is recorded); any node hosting the expectation
 * then resumes the episode from its journal and the wait looks again.
 */
@Injectable()
export class WaitSteps {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly steps: StepWrites,
    private readonly writes: OwnedWrites,
    private readonly identity: NodeIdentity,
    @Inject(RETRY_WAKE_UPS) private readonly wakeUps: RetryWakeUps,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** The bus channel event waits match on and wake-ups are announced on; null without one. */
  get channel(): string | null {
    return this.options.bus === 'postgres'
      ? busChannel(this.options.stackSlug, this.options.env)
      : null;
  }

  run(scope: WriteScope, ownership: Ownership, step: WaitStep): Promise<WaitStepOutcome> {
    // The attempt whose COMMIT was sent: if its answer was lost, it may have committed.
    let sent: { record: StepRecord; result: unknown } | undefined;
    const attempt = async (): Promise<WaitStepOutcome> => {
      sent = undefined;
      try {
        return await this.database.transaction((client) =>
          this.decide(client, scope.episodeId, ownership, step, (record, result) => {
            sent = { record, result };
          }),
        );
      } catch (error) {
        if (error instanceof NotOwner) return { outcome: 'not_owner', result: undefined };
        throw error;
      }
    };
    const again = async (): Promise<WaitStepOutcome> => {
      const { rows } = await this.database.sql.query<{ parked: boolean }>(PARKED, [
        scope.episodeId,
        step.stepNo,
      ]);
      if (rows[0]?.parked) return { outcome: 'waiting', deadline: null };
      if (sent) {
        const found = await this.steps.confirm(scope.episodeId, ownership, sent.record);
        if (found !== null) return { outcome: found, result: sent.result };
      }
      return attempt();
    };
    return this.writes.transaction(scope, `wait ${step.stepNo} ("${step.name}")`, attempt, again);
  }

  private async decide(
    client: SqlExecutor,
    episodeId: string,
    ownership: Ownership,
    step: WaitStep,
    sending: (record: StepRecord, result: unknown) => void,
  ): Promise<WaitStepOutcome> {
    const started = performance.now();
    const channel = this.channel;
    if (step.wait.kind === 'event') {
      if (channel === null)
        throw new TypeError(
          `${step.name}: ep.waitForEvent needs the durable bus (bus: 'postgres'), whose stored ` +
            `events it matches`,
        );
      // First: a host's transaction that publishes and then signals takes them in this order too.
      await EventWaitStore.lock(client, channel, step.wait.type);
    }
    const { rows } = await this.claims.fencedStatement<{
      waiting_for: WaitingFor | null;
      cancel_requested_at: Date | null;
      db_now: Date;
    }>(client, ownership, LOCK_RUNNING, [episodeId]);
    const row = rows[0];
    if (!row) return { outcome: 'not_owner', result: undefined };
    if (row.cancel_requested_at) return { outcome: 'canceled' };
    const now = new Date(row.db_now).getTime();
    const { wait } = step;
    // A wait resumed by its wake-up keeps the deadline it began with.
    const deadline =
      row.waiting_for?.stepNo === step.stepNo
        ? row.waiting_for.deadline
        : wait.timeoutMs === undefined
          ? null
          : new Date(now + wait.timeoutMs).toISOString();
    const found = await this.look(client, episodeId, step);
    const over = !found.done && deadline !== null && now >= Date.parse(deadline);
    if (found.done || over) {
      const result = found.done ? found.result : await found.timedOut();
      const record: StepRecord = {
        stepNo: step.stepNo,
        journalNo: step.journalNo,
        name: step.name,
        resultJson: encodeStepResult(step.name, result),
        durationMs: Math.round(performance.now() - started),
      };
      const outcome: StepWriteOutcome = await this.steps.writeWithin(
        client,
        episodeId,
        ownership,
        record,
      );
      if (outcome === 'not_owner') throw new NotOwner();
      await client.query(CLEAR, [episodeId]);
      await this.wakeUps.dropWaitsWithin(client, episodeId);
      sending(record, result);
      return { outcome, result };
    }
    const waitingFor: WaitingFor = { ...wait, stepNo: step.stepNo, deadline, channel };
    if (wait.kind === 'event' && channel !== null)
      await EventWaitStore.register(client, {
        channel,
        type: wait.type,
        episodeId,
        stepNo: step.stepNo,
        match: wait.match,
      });
    const parked = await client.query(PARK, [episodeId, JSON.stringify(waitingFor)]);
    await this.wakeUps.dropWaitsWithin(client, episodeId);
    const delayMs = deadline === null ? NEVER_MS : Math.max(0, Date.parse(deadline) - now);
    await this.wakeUps.scheduleWithin(
      client,
      toEpisode(parked.rows[0] as Record<string, unknown>),
      delayMs,
      this.identity.name(),
      'wait',
    );
    await this.claims.completeWithin(client, ownership.key, ownership.owner, ownership.fence);
    return { outcome: 'waiting', deadline };
  }

  /** What the wait wants, if it is there; otherwise how it reads once its deadline passed. */
  private async look(client: SqlExecutor, episodeId: string, step: WaitStep): Promise<Found> {
    const { wait } = step;
    const timedOut = { status: 'timed_out' as const };
    switch (wait.kind) {
      case 'signal': {
        const signal = await SignalStore.take(client, episodeId, wait.name, step.stepNo);
        if (!signal) return { done: false, timedOut: () => Promise.resolve(timedOut) };
        return {
          done: true,
          result: {
            status: 'received',
            payload: signal.payload,
            signalId: signal.id,
            sentAt: new Date(signal.sentAt).toISOString(),
            ...(signal.traceContext ? { traceContext: signal.traceContext } : {}),
          },
        };
      }
      case 'event': {
        const event = await EventWaitStore.matched(client, episodeId, step.stepNo);
        if (event) return { done: true, result: { status: 'received', event } };
        return {
          done: false,
          timedOut: async () => {
            await EventWaitStore.drop(client, episodeId, step.stepNo);
            return timedOut;
          },
        };
      }
      case 'children': {
        const children = await outcomesOf(client, wait.children);
        if (children.every((c) => TERMINAL.has(c.status)))
          return { done: true, result: { status: 'done', children } };
        return { done: false, timedOut: () => Promise.resolve({ ...timedOut, children }) };
      }
    }
  }
}

/** The children's outcomes, in the order asked; a live one as its status alone. */
async function outcomesOf(
  client: SqlExecutor,
  ids: readonly string[],
): Promise<Array<EpisodeOutcome | ChildPending>> {
  const { rows } = await client.query<{
    id: string;
    status: EpisodeOutcome['status'] | ChildPending['status'];
    result: unknown;
    error_class: string | null;
    error_detail: string | null;
  }>(OUTCOMES, [ids]);
  const byId = new Map(rows.map((r) => [r.id, r]));
  return ids.map((id) => {
    const row = byId.get(id);
    // A child archived and deleted by retention before its parent looked: nothing is left of it.
    if (!row)
      return {
        episodeId: id,
        status: 'failed',
        result: null,
        errorClass: 'gone',
        error: 'the child episode no longer exists',
      };
    if (!TERMINAL.has(row.status))
      return { episodeId: id, status: row.status as ChildPending['status'] };
    return {
      episodeId: id,
      status: row.status as EpisodeOutcome['status'],
      result: row.result ?? null,
      errorClass: row.error_class,
      error: row.error_detail,
    };
  });
}
