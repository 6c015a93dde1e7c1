/**
 * Every episode ends as its policy says for the faults it met, and no step runs again after its
 * checkpoint committed.
 */
import type { ActorId } from '../node/node-protocol.js';
import { text, type EpisodeHistory } from './audit-reader.js';
import type { CheckContext } from './check-context.js';

const LIVE = new Set(['queued', 'deferred', 'waiting', 'running', 'blocked']);
/** Error classes no fault of this schedule can cause. */
const NEVER = new Set(['tampered', 'unknown_actor', 'nondeterministic_resume', 'budget_exceeded']);

export function checkOutcomes(ctx: CheckContext): void {
  for (const episode of ctx.history.episodes.values()) {
    checkOutcome(ctx, episode);
    checkSteps(ctx, episode);
  }
}

/** The answers the schedule's cancels of this episode got ('canceled', 'requested', …). */
function cancelAnswers(ctx: CheckContext, episode: EpisodeHistory): string[] {
  return ctx.log.work.flatMap((w) => {
    if (w.op.kind !== 'cancel' || !w.answer.ok) return [];
    const target = ctx.work.get(w.op.target)?.answer;
    return target?.ok === true && target.episodeId === episode.id ? [w.answer.status ?? ''] : [];
  });
}

function checkOutcome(ctx: CheckContext, episode: EpisodeHistory): void {
  const last = episode.last;
  const status = last.status as string;
  const errorClass = (last.error_class as string | null) ?? null;
  const detail = text(last.error_detail).slice(0, 200);
  const name = `${episode.actor}.${episode.expectation} ${episode.id} (${episode.payload.op})`;
  const fail = (message: string) =>
    ctx.fail('episode-outcome', `${name} ${message}`, { episodes: [episode.id] });
  if (LIVE.has(status)) return fail(`was left ${status} after quiescence`);
  const attempts = ctx.attempts(episode);
  const work = episode.payload;
  const throws = work.throwAt !== undefined && work.throwAt <= work.steps ? (work.throws ?? 0) : 0;
  const exhausted = throws >= attempts;
  const disturbed = ctx.disturbances(episode);
  const policy = ctx.spec(episode)?.policy ?? 'fail';
  const cancels = cancelAnswers(ctx, episode);
  // Canceled at once (it had not started): it never runs.
  if (cancels.includes('canceled') && status !== 'canceled')
    return fail(`ended ${status}, but a cancel answered canceled`);
  if (status === 'done') {
    if (exhausted && disturbed.length === 0)
      fail(`ended done, but its step threw ${throws} time(s) against ${attempts} attempt(s)`);
    return;
  }
  if (status === 'canceled') {
    const asked = cancels.some((c) => c === 'canceled' || c === 'requested');
    if (!asked) fail('ended canceled, but the schedule canceled nothing of it');
    return;
  }
  const ended = `ended ${status}/${errorClass}${detail ? ` (${detail})` : ''}`;
  const { setup } = ctx.log;
  if (errorClass === 'orphaned') {
    const spent = Number(last.attempts ?? 0) >= Number(last.max_attempts ?? 3);
    if (disturbed.length === 0) return fail(`${ended} with no fault touching it while it ran`);
    if (policy === 'restart' && !spent)
      return fail(
        `${ended}: policy restart, attempts ${String(last.attempts)} of ${String(last.max_attempts)}`,
      );
    return;
  }
  if (errorClass === 'not_hosted') {
    const gap = ctx.longestHostGap(episode.actor as ActorId, episode.env, episode.stack, false);
    if (gap < setup.timings.notHostedGraceMs - 1_000)
      fail(`${ended}: its actor was never unhosted in a live env for longer than ${gap} ms`);
    return;
  }
  if (errorClass === 'trigger_request_expired') {
    const gap = ctx.longestHostGap(episode.actor as ActorId, episode.env, episode.stack, true);
    if (gap < setup.timings.triggerRequestTtlMs - 1_000)
      fail(`${ended}: no full host missing for longer than ${gap} ms`);
    return;
  }
  if (errorClass !== null && NEVER.has(errorClass)) return fail(ended);
  if (!exhausted)
    fail(
      `${ended}, but its step threw ${throws} time(s) against ${attempts} attempt(s)${note(disturbed)}`,
    );
}

function note(disturbed: string[]): string {
  return disturbed.length > 0
    ? `; faults it met: ${disturbed.join('; ')}`
    : '; no fault touched it';
}

/** A step's side effect after the journal row that checkpointed it is a step run again. */
function checkSteps(ctx: CheckContext, episode: EpisodeHistory): void {
  const journaled = new Map<number, number[]>();
  for (const row of episode.journal) {
    if (row.op !== 'INSERT' || row.row.kind !== 'step') continue;
    const match = /^s(\d+)$/.exec(String(row.row.name));
    if (!match) continue;
    const n = Number(match[1]);
    journaled.set(n, [...(journaled.get(n) ?? []), row.at]);
  }
  for (const [n, times] of journaled) {
    if (times.length > 1)
      ctx.fail('step-once', `${episode.id} journaled s${n} ${times.length} times`, {
        episodes: [episode.id],
      });
  }
  const effects = ctx.history.effects.filter(
    (e) => e.episodeId === episode.id && e.kind === 'done',
  );
  for (const effect of effects) {
    const committed = journaled.get(effect.stepNo)?.[0];
    if (committed !== undefined && effect.at > committed) {
      const late = effect.at - committed;
      const message = `${episode.id} ran s${effect.stepNo} again on ${effect.node} ${late} ms after its checkpoint`;
      ctx.fail('step-once', message, { episodes: [episode.id] });
    }
  }
  if (episode.last.status === 'done') {
    for (let n = 1; n <= episode.payload.steps; n++) {
      if (!journaled.has(n))
        ctx.fail('step-once', `${episode.id} ended done without journaling s${n}`, {
          episodes: [episode.id],
        });
    }
  }
}
