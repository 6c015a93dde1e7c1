/**
 * Terminal lifecycle events: no episode announces its end twice or with another status's event,
 * and on a seed where every node reads them (SeedSetup.lifecycleReaders) every end writes its
 * one event, whatever faults it met: a node cut off, killed or draining still counts as a reader,
 * and an end that cannot tell writes.
 */
import { TERMINAL_EVENTS } from '../node/node-protocol.js';
import type { CheckContext } from './check-context.js';

const TYPES = new Set(Object.values(TERMINAL_EVENTS));

export function checkLifecycleEvents(ctx: CheckContext): void {
  const announced = new Map<string, Array<{ type: string; eventId: string }>>();
  for (const event of ctx.history.events.values()) {
    if (!TYPES.has(event.type)) continue;
    const episodeId = (event.payload as unknown as { episodeId?: string }).episodeId ?? '';
    announced.set(episodeId, [
      ...(announced.get(episodeId) ?? []),
      { type: event.type, eventId: event.eventId },
    ]);
  }
  const everyNodeReads = ctx.log.setup.lifecycleReaders;
  for (const episode of ctx.history.episodes.values()) {
    const status = episode.last.status as string;
    const expected = TERMINAL_EVENTS[status];
    const events = announced.get(episode.id) ?? [];
    const name = `${episode.actor}.${episode.expectation} ${episode.id} (${episode.payload.op})`;
    const fail = (message: string) =>
      ctx.fail('lifecycle-events', `${name} ${message}`, {
        episodes: [episode.id],
        events: events.map((e) => e.eventId),
      });
    const types = events.map((e) => e.type);
    if (events.length > 1) fail(`announced its end ${events.length} times: ${types.join(', ')}`);
    else if (events.length === 1 && types[0] !== expected)
      fail(`ended ${status} but announced ${types[0]}`);
    else if (events.length === 0 && expected !== undefined && everyNodeReads)
      fail(`ended ${status} without ${expected}, though every node reads it`);
  }
}
