import { describe, expect, it } from '@jest/globals';
import { parseSnapshot } from './db-snapshot.js';
import { DurableConsumer } from './durable-consumer.js';
import type { LoggedEvent } from './event-log.js';

const logged = (id: string): LoggedEvent => ({
  id,
  txId: id,
  committedAt: 0,
  ageMs: 0,
  event: { type: 't', eventId: id, payload: {}, publishedAt: '' },
  trusted: true,
  oversizedBytes: null,
});

const snapshot = (xmax: number) => parseSnapshot(`${xmax}:${xmax}:`);

describe('DurableConsumer', () => {
  it(
    'moves its position to a read only once that read and every one before it ' + 'settled',
    async () => {
      const pending = new Map<string, () => void>();
      const consumer = new DurableConsumer(
        'a.b',
        't',
        (event) => new Promise((resolve) => pending.set(event.eventId, resolve)),
        () => undefined,
      );
      consumer.deliver(logged('1'), 0);
      consumer.readTo(snapshot(10));
      consumer.deliver(logged('2'), 0);
      consumer.readTo(snapshot(20));
      expect(consumer.take(true)).toBeUndefined();

      pending.get('2')?.();
      await Promise.resolve();
      expect(consumer.take(true)).toBeUndefined();

      pending.get('1')?.();
      await Promise.resolve();
      expect(consumer.take(false)?.xmax).toBe('20');
      expect(consumer.take(true)).toBeUndefined();
    },
  );

  it('stores a position that only reads without its events moved when asked for idle ones', () => {
    const consumer = new DurableConsumer(
      'a.b',
      't',
      async () => undefined,
      () => undefined,
    );
    consumer.readTo(snapshot(5));
    expect(consumer.take(false)).toBeUndefined();
    expect(consumer.take(true)?.xmax).toBe('5');
  });

  it('records an event whose handler rejects and moves past it', async () => {
    const skipped: string[] = [];
    const consumer = new DurableConsumer(
      'a.b',
      't',
      async () => Promise.reject(new Error('bad row')),
      (_c, event) => skipped.push(event.eventId),
    );
    consumer.deliver(logged('9'), 0);
    consumer.readTo(snapshot(30));
    await new Promise((resolve) => setImmediate(resolve));
    expect(skipped).toEqual(['9']);
    expect(consumer.take(false)?.xmax).toBe('30');
  });

  it('keeps its marks bounded behind an event that never settles, and never moves past it', () => {
    const consumer = new DurableConsumer(
      'a.b',
      't',
      () => new Promise(() => undefined),
      () => undefined,
    );
    consumer.deliver(logged('1'), 0);
    for (let i = 1; i <= 1_000; i++) consumer.readTo(snapshot(i));
    expect((consumer as unknown as { marks: unknown[] }).marks.length).toBeLessThanOrEqual(64);
    expect(consumer.take(true)).toBeUndefined();
  });
});
