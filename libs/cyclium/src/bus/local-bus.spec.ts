import { afterEach, describe, expect, it, jest } from '@jest/globals';
import { Logger } from '@nestjs/common';
import type { BusEvent, BusHandler } from './bus.interface.js';
import { InvalidBusEventError } from './bus-errors.js';
import { LocalBus } from './local-bus.js';

/**
 * Resolves with the next event of `type` on `bus` that `matches`: delivery itself is the condition,
 * no sleeping.
 */
function next(
  bus: LocalBus,
  type: string,
  matches: (event: BusEvent) => boolean = () => true,
): Promise<BusEvent> {
  return new Promise((resolve) => {
    const off = bus.subscribe(type, (event) => {
      if (!matches(event)) return;
      off();
      resolve(event);
    });
  });
}

describe('LocalBus', () => {
  afterEach(() => {
    jest.restoreAllMocks();
  });

  it(
    'delivers to subscribers of the type and of *, all with the publisher-minted ' + 'eventId',
    async () => {
      const bus = new LocalBus();
      const seen: Array<[string, BusEvent]> = [];
      bus.subscribe('order.placed', (e) => void seen.push(['type-1', e]));
      bus.subscribe('order.placed', (e) => void seen.push(['type-2', e]));
      bus.subscribe('*', (e) => void seen.push(['star', e]));
      bus.subscribe('order.shipped', (e) => void seen.push(['other', e]));
      const delivered = next(bus, '*');

      const published = await bus.publish('order.placed', { id: 7 });
      await delivered;

      expect(published).toEqual({
        type: 'order.placed',
        eventId: expect.stringMatching(/^[0-9a-f-]{36}$/),
        payload: { id: 7 },
        publishedAt: expect.any(String),
      });
      expect(new Date(published.publishedAt).toISOString()).toBe(published.publishedAt);
      expect(seen.map(([who]) => who)).toEqual(['type-1', 'type-2', 'star']);
      for (const [, event] of seen) expect(event.eventId).toBe(published.eventId);
    },
  );

  it('mints a new id per publish and keeps a given one', async () => {
    const bus = new LocalBus();
    const a = await bus.publish('t', 1);
    const b = await bus.publish('t', 1);
    expect(a.eventId).not.toBe(b.eventId);

    const delivered = next(bus, 't', (e) => e.payload === 2);
    const given = await bus.publish('t', 2, { eventId: 'webhook-delivery-42' });
    expect(given.eventId).toBe('webhook-delivery-42');
    expect((await delivered).eventId).toBe('webhook-delivery-42');
  });

  it('stops delivering to a handler once it unsubscribes, and only to that one', async () => {
    const bus = new LocalBus();
    const gone = jest.fn<BusHandler>();
    const kept = jest.fn<BusHandler>();
    const off = bus.subscribe('t', gone);
    bus.subscribe('t', kept);
    off();
    off(); // twice is harmless

    const delivered = next(bus, 't');
    await bus.publish('t', 'x');
    await delivered;
    expect(gone).not.toHaveBeenCalled();
    expect(kept).toHaveBeenCalledTimes(1);
  });

  it('treats two subscriptions of one function as two, each with its own unsubscribe', async () => {
    const bus = new LocalBus();
    const handler = jest.fn<BusHandler>();
    const offFirst = bus.subscribe('t', handler);
    bus.subscribe('t', handler);
    offFirst();

    const delivered = next(bus, 't');
    await bus.publish('t', null);
    await delivered;
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('logs a throwing or rejecting handler and still calls the others', async () => {
    const error = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    const bus = new LocalBus();
    const after = jest.fn<BusHandler>();
    bus.subscribe('t', () => {
      throw new Error('sync boom');
    });
    bus.subscribe('t', async () => {
      throw new Error('async boom');
    });
    bus.subscribe('t', after);
    const delivered = next(bus, '*');

    await bus.publish('t', 1);
    await delivered;
    expect(after).toHaveBeenCalledTimes(1);
    // The rejection is logged a microtask after delivery.
    await Promise.resolve();
    const messages = error.mock.calls.map((call) => String(call[0]));
    expect(messages).toEqual([
      expect.stringContaining('sync boom'),
      expect.stringContaining('async boom'),
    ]);

    // And the bus keeps delivering afterwards.
    const again = next(bus, 't');
    await bus.publish('t', 2);
    expect((await again).payload).toBe(2);
  });

  it('never delivers inside publish: handlers run on a later macrotask', async () => {
    const bus = new LocalBus();
    const calls: string[] = [];
    bus.subscribe('t', () => void calls.push('handler'));

    const pending = bus.publish('t', 1);
    calls.push('after publish returned');
    await pending;
    calls.push('after publish resolved');
    await new Promise<void>((resolve) => setImmediate(resolve));

    expect(calls).toEqual(['after publish returned', 'after publish resolved', 'handler']);
  });

  it(
    'delivers events published in one tick in order, and events published by a handler ' + 'later',
    async () => {
      const bus = new LocalBus();
      const order: number[] = [];
      bus.subscribe<number>('n', (e) => {
        order.push(e.payload);
        if (e.payload === 0) void bus.publish('n', 99);
      });
      const last = new Promise<void>((resolve) =>
        bus.subscribe<number>('n', (e) => (e.payload === 99 ? resolve() : undefined)),
      );

      for (let i = 0; i < 5; i++) void bus.publish('n', i);
      await last;
      expect(order).toEqual([0, 1, 2, 3, 4, 99]);
    },
  );

  it('refuses to publish the wildcard or an empty type', async () => {
    const bus = new LocalBus();
    await expect(bus.publish('*', 1)).rejects.toThrow(/concrete, non-empty type/);
    await expect(bus.publish('', 1)).rejects.toThrow(/concrete, non-empty type/);
  });

  it(
    'bounds the type and the eventId at 200 characters, naming the field, before anything is ' +
      'delivered',
    async () => {
      const bus = new LocalBus();
      const seen: BusEvent[] = [];
      bus.subscribe('*', (e) => void seen.push(e));
      const refusal = async (publishing: Promise<unknown>) => {
        const error = await publishing.then(
          () => null,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(InvalidBusEventError);
        return error as InvalidBusEventError;
      };
      const longId = await refusal(bus.publish('t', {}, { eventId: 'x'.repeat(4_000) }));
      expect(longId.field).toBe('eventId');
      expect(longId.message).toMatch(/eventId must be at most 200 characters \(got 4000/);
      expect((await refusal(bus.publish('t'.repeat(201), {}))).field).toBe('type');
      // Characters, not UTF-16 units: 200 emoji are 200 characters.
      const fits = await bus.publish('t'.repeat(200), {}, { eventId: '😀'.repeat(200) });
      expect((await refusal(bus.publish('t', {}, { eventId: '😀'.repeat(201) }))).field).toBe(
        'eventId',
      );
      await next(bus, '*', (e) => e.eventId === fits.eventId);
      expect(seen).toHaveLength(1);
    },
  );
});
