import { describe, expect, it, jest } from '@jest/globals';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Bus, type BusEvent } from './bus.interface.js';
import type { DurableEvents } from './durable-events.interface.js';
import { EventOutbox } from './event-outbox.service.js';

/** A durable transport that records what it was asked to do. */
function durable() {
  const appended: BusEvent[][] = [];
  const wake = jest.fn();
  const durableEvents: DurableEvents = {
    appendWithin: async (_client, events) => void appended.push([...events]),
    appendFragment: () => '',
    wake,
  };
  const transport = Object.assign(Object.create(Bus.prototype) as Bus, durableEvents);
  return { outbox: new EventOutbox(transport), appended, wake };
}

const client = {} as SqlExecutor;

describe('EventOutbox.within', () => {
  it(
    'writes the events in the caller transaction and wakes listeners once it has ' + 'committed',
    async () => {
      const { outbox, appended, wake } = durable();
      const announce = await outbox.within(client, [
        { type: 'episode.failed', payload: { episodeId: 'e1' } },
      ]);
      expect(appended.map((batch) => batch.map((e) => e.type))).toEqual([['episode.failed']]);
      expect(wake).not.toHaveBeenCalled();
      announce();
      expect(wake).toHaveBeenCalledTimes(1);
    },
  );

  it(
    'with nothing to say, writes nothing and wakes nobody (each NOTIFY costs every listener a ' +
      'transaction)',
    async () => {
      const { outbox, appended, wake } = durable();
      const announce = await outbox.within(client, []);
      announce();
      expect(appended).toEqual([]);
      expect(wake).not.toHaveBeenCalled();
    },
  );
});
