/**
 * Exactly one episode per accepted trigger and per stored event and subscribed expectation,
 * allowing for what the schedule removed (a dedupe duplicate, a debounce or cooldown that swallowed
 * the event, an event retention deleted undispatched after `busUndispatchedMaxAgeMs`).
 */
import { SUBJECT_COOLDOWN_MS, SUBJECT_DEBOUNCE_MS } from '../node/actor-policies.js';
import type { ActorId } from '../node/node-protocol.js';
import type { EventHistory } from './audit-reader.js';
import { CLOCK_SLACK_MS, SPECS, type CheckContext } from './check-context.js';
import { possibleFirings } from './subject-windows.js';

const ACCEPTED = new Set(['started', 'queued', 'deferred']);

export function checkTriggers(ctx: CheckContext): void {
  for (const record of ctx.log.work) {
    if (record.op.kind !== 'trigger') continue;
    const op = ctx.opOf(record.n);
    const episodes = (ctx.byOp.get(op) ?? []).map((e) => e.id);
    const answer = record.answer;
    const what = `trigger ${op} (${record.op.actor}.${record.op.expectation} on ${record.nodeId ?? 'no node'})`;
    if (answer.ok && ACCEPTED.has(answer.status ?? '')) {
      if (episodes.length !== 1 || episodes[0] !== answer.episodeId) {
        const message = `${what} answered ${answer.status} ${answer.episodeId}, but ran as ${episodes.length} episodes`;
        ctx.fail('one-episode-per-trigger', message, {
          episodes: [...new Set([...episodes, answer.episodeId ?? ''])].filter(Boolean),
        });
      }
    } else if (answer.ok) {
      if (episodes.length > 0)
        ctx.fail(
          'one-episode-per-trigger',
          `${what} answered ${answer.status}, yet has an episode`,
          { episodes },
        );
    } else if (episodes.length > 1) {
      ctx.fail(
        'one-episode-per-trigger',
        `${what} failed (${answer.error}), yet ran as ${episodes.length} episodes`,
        {
          episodes,
        },
      );
    }
  }
  checkKeys(ctx);
  checkEvents(ctx);
  for (const [op, episodes] of ctx.byOp) {
    const known = episodes.some((e) => e.eventId !== null)
      ? ctx.history.events.has(op)
      : /-w\d+$/.test(op) && ctx.work.has(Number(op.split('-w')[1]));
    if (!known)
      ctx.fail('unaccounted-episode', `episodes for ${op}, which no operation accepted`, {
        episodes: episodes.map((e) => e.id),
      });
  }
}

/** A manual dedupe key never has two unarchived episodes at once. */
function checkKeys(ctx: CheckContext): void {
  const byKey = new Map<string, typeof list>();
  const list = [...ctx.history.episodes.values()].filter(
    (e) => e.triggerType === 'manual' && e.dedupeKey,
  );
  for (const episode of list)
    byKey.set(episode.dedupeKey as string, [
      ...(byKey.get(episode.dedupeKey as string) ?? []),
      episode,
    ]);
  for (const [key, episodes] of byKey) {
    const sorted = episodes.sort((a, b) => a.insertedAt - b.insertedAt);
    for (let i = 1; i < sorted.length; i++) {
      const before = sorted[i - 1] as (typeof sorted)[number];
      const archivedAt = before.rows.find((r) => r.row.archived_at)?.at ?? Infinity;
      if (archivedAt > (sorted[i] as (typeof sorted)[number]).insertedAt) {
        ctx.fail('one-episode-per-key', `key ${key} had two live episodes at once`, {
          episodes: [before.id, (sorted[i] as (typeof sorted)[number]).id],
        });
      }
    }
  }
}

function checkEvents(ctx: CheckContext): void {
  const { setup } = ctx.log;
  for (const record of ctx.log.work) {
    if (record.op.kind !== 'publish' || !record.answer.ok) continue;
    if (!ctx.history.events.has(record.op.eventId)) {
      ctx.fail(
        'acknowledged-event-stored',
        `event ${record.op.eventId} was acknowledged but never stored`,
        {
          events: [record.op.eventId],
        },
      );
    }
  }
  const subjects = new Map<string, EventHistory[]>();
  for (const event of ctx.history.events.values()) {
    if (event.type === 'fs.subject')
      subjects.set(event.payload.subject ?? '', [
        ...(subjects.get(event.payload.subject ?? '') ?? []),
        event,
      ]);
    if (event.type !== 'fs.work') continue;
    for (const [name, spec] of Object.entries(SPECS)) {
      if (spec.event !== 'fs.work') continue;
      const [actor, expectation] = name.split('.') as [string, string];
      const hosted = setup.slots.some(
        (s) => s.env === event.env && s.stack === event.stack && s.actors.includes(actor as never),
      );
      if (!hosted) continue;
      const episodes = (ctx.byOp.get(event.eventId) ?? [])
        .filter((e) => e.expectation === expectation)
        .map((e) => e.id);
      if (episodes.length === 1) continue;
      if (
        episodes.length === 0 &&
        (prunedUndispatched(ctx, event) || tooOldToDispatch(ctx, event, actor))
      )
        continue;
      const ran = `ran ${episodes.length} episodes of ${name}`;
      const message = `event ${event.eventId} (fs.work) ${ran}${deletedNote(event)}`;
      ctx.fail('one-episode-per-event', message, { episodes, events: [event.eventId] });
    }
  }
  for (const [subject, events] of subjects) checkSubject(ctx, subject, events);
}

/**
 * No node could read it (every host of its expectations down or disabled) before it was older than
 * `retention.archiveAfter` (+ the debounce): a node may then skip it, counted on its position,
 * rather than risk a second episode for an event whose first was archived (issue 40, item 12).
 */
function tooOldToDispatch(ctx: CheckContext, event: EventHistory, actor: string): boolean {
  const archiveAfter = ctx.log.setup.windows?.archiveAfter ?? 604_800_000;
  const debounce = event.type === 'fs.subject' ? SUBJECT_DEBOUNCE_MS : 0;
  // A host that came up this close to the bound may not have read the event before it.
  const catchUp = ctx.log.setup.timings.busPollMs + 3_000;
  const bound = event.createdAt + archiveAfter + debounce - catchUp;
  return !ctx.eventHostUp(actor as ActorId, event.env, event.stack, event.createdAt, bound);
}

/** Retention deleted it past `busUndispatchedMaxAgeMs` before any node dispatched it: documented, not a loss. */
function prunedUndispatched(ctx: CheckContext, event: EventHistory): boolean {
  const windows = ctx.log.setup.windows;
  return (
    !!windows &&
    event.deletedAt !== null &&
    event.deletedAt >= event.createdAt + windows.busUndispatchedMaxAgeMs - CLOCK_SLACK_MS
  );
}

function deletedNote(event: EventHistory): string {
  return event.deletedAt === null
    ? ''
    : ` (event deleted ${event.deletedAt - event.createdAt} ms after it was written)`;
}

function checkSubject(ctx: CheckContext, subject: string, events: EventHistory[]): void {
  const episodes = events.flatMap((e) =>
    (ctx.byOp.get(e.eventId) ?? []).filter((x) => x.expectation === 'on_subject'),
  );
  const fired = new Map<string, number>();
  for (const episode of episodes)
    fired.set(episode.eventId ?? '', (fired.get(episode.eventId ?? '') ?? 0) + 1);
  const ids = events.map((e) => e.eventId);
  const twice = [...fired].filter(([, n]) => n > 1);
  if (twice.length > 0) {
    const counts = twice.map(([id, n]) => `${id} ×${n}`).join(', ');
    const message = `subject ${subject}: event(s) ${counts} ran more than once`;
    ctx.fail('one-episode-per-event', message, {
      episodes: episodes.map((e) => e.id),
      events: ids,
    });
  }
  const timed = events.map((e) => ({ eventId: e.eventId, at: e.createdAt }));
  const options = possibleFirings(timed, SUBJECT_DEBOUNCE_MS, SUBJECT_COOLDOWN_MS);
  const actual = [...fired.keys()].sort().join(',');
  if (!options.some((option) => [...option].sort().join(',') === actual)) {
    const pruned = events.some(
      (e) => prunedUndispatched(ctx, e) || tooOldToDispatch(ctx, e, 'fs_alpha'),
    );
    if (pruned) return;
    const times = events
      .map((e) => `${e.eventId}@+${e.createdAt - (events[0] as EventHistory).createdAt}ms`)
      .join(' ');
    const expected = options.map((o) => `[${o.join(',')}]`).join(' or ');
    const windows = `debounce ${SUBJECT_DEBOUNCE_MS} ms, cooldown ${SUBJECT_COOLDOWN_MS} ms`;
    const message = `subject ${subject} (${times}) fired [${actual}], expected ${expected} (${windows})`;
    ctx.fail('debounce-cooldown', message, { episodes: episodes.map((e) => e.id), events: ids });
  }
}
