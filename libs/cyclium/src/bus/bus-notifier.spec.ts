import { describe, expect, it } from '@jest/globals';
import type { QueryConfig } from 'pg';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { BusNotifier, notifyPayloads, type Heard } from './bus-notifier.js';

/** An executor that keeps the payloads of each NOTIFY statement it is given. */
function recordingSql(): { sent: string[][]; sql: SqlExecutor } {
  const sent: string[][] = [];
  const sql = {
    query: async (config: QueryConfig) => {
      sent.push((config.values as [string, string[]])[1]);
      return { rows: [] };
    },
  } as unknown as SqlExecutor;
  return { sent, sql };
}

describe('BusNotifier payloads', () => {
  it(
    'sends a bare wake-up as an empty payload, which every node (older ones too) reads as ' +
      '"look"',
    () => {
      expect(notifyPayloads(true, [])).toEqual(['']);
      expect(notifyPayloads(false, [])).toEqual([]);
      expect(BusNotifier.parse('')).toEqual({ wake: true, tokens: [] });
    },
  );

  it(
    'carries signal tokens with the wake-up on the first payload only, each under the NOTIFY ' +
      'limit',
    () => {
      const tokens = Array.from({ length: 600 }, (_, i) => i.toString(16).padStart(32, '0'));
      const payloads = notifyPayloads(true, tokens);
      expect(payloads.length).toBeGreaterThan(1);
      expect(payloads.every((p) => Buffer.byteLength(p) < 8000)).toBe(true);
      const heard = payloads.map((p) => BusNotifier.parse(p));
      expect(heard.map((h) => h.wake)).toEqual(payloads.map((_, i) => i === 0));
      expect(heard.flatMap((h) => h.tokens)).toEqual(tokens);
      expect(BusNotifier.parse(notifyPayloads(false, ['a'])[0] as string)).toEqual({
        wake: false,
        tokens: ['a'],
      });
    },
  );
});

describe('BusNotifier wake-ups its own node can skip', () => {
  it(
    'names the sender when no handler on it wants what woke the channel, and every other reader ' +
      'still reads',
    async () => {
      const { sent, sql } = recordingSql();
      const bus = new BusNotifier(sql, 'cyclium_bus', 0, undefined, () => 'node-q');
      bus.wake(false);
      await bus.idle();
      bus.signal(['t1']);
      await bus.idle();
      expect(sent).toEqual([['q:node-q'], ['d:t1']]);
      expect(BusNotifier.parse('q:node-q')).toEqual({ wake: true, tokens: [], notFor: 'node-q' });

      // Wake-ups coalesced into one NOTIFY: one that a handler here wants makes it a plain one.
      bus.wake(false);
      bus.wake(false);
      bus.wake(true);
      await bus.idle();
      expect(sent.slice(2)).toEqual([['q:node-q'], ['']]);
    },
  );
});

describe('BusNotifier and a lone node', () => {
  function notifier(alone: { value: boolean }) {
    const { sent, sql } = recordingSql();
    const heardLocally: Heard[] = [];
    const audience = {
      get alone() {
        return alone.value;
      },
      joined: () => undefined,
    };
    const bus = new BusNotifier(sql, 'cyclium_bus', 0, {
      audience,
      hear: (heard) => heardLocally.push(heard),
    });
    return { bus, sent, heardLocally };
  }

  it(
    'hears its own wake-ups and signals in-process while alone, and NOTIFYs them ' + 'otherwise',
    async () => {
      const alone = { value: true };
      const { bus, sent, heardLocally } = notifier(alone);
      bus.wake();
      bus.signal(['t1']);
      await bus.idle();
      expect(sent).toEqual([]);
      expect(heardLocally.flatMap((h) => h.tokens)).toEqual(['t1']);
      expect(heardLocally.some((h) => h.wake)).toBe(true);

      alone.value = false;
      bus.wake();
      await bus.idle();
      expect(sent).toEqual([['']]);
    },
  );

  it(
    'announces itself even while alone, and a listener reads the announcement as a wake-up ' +
      'naming the node',
    async () => {
      const { bus, sent } = notifier({ value: true });
      bus.announce('node-b');
      await bus.idle();
      expect(sent).toEqual([['j:node-b']]);
      expect(BusNotifier.parse('j:node-b')).toEqual({ wake: true, tokens: [], joined: 'node-b' });
    },
  );

  it("reads a listener's echo (its self-check) as asking for nothing: no read, no signal", () => {
    expect(BusNotifier.parse('e:')).toEqual({ wake: false, tokens: [] });
  });
});

describe('BusNotifier wake-ups that name their event types', () => {
  function recorder() {
    const { sent, sql } = recordingSql();
    return { sent, bus: new BusNotifier(sql, 'cyclium_bus', 0, undefined, () => 'node-t') };
  }

  it('lists the types of the wake-ups coalesced into one NOTIFY, signals apart', async () => {
    const { sent, bus } = recorder();
    // The first request is sent at once; those made while it is in flight share the next NOTIFY.
    bus.wake(true, ['a.one']);
    bus.wake(true, ['a.one']);
    bus.wake(false, ['episode.completed', 'a.one']);
    bus.signal(['t1']);
    await bus.idle();
    expect(sent).toEqual([['t:["a.one"]'], ['t:["a.one","episode.completed"]', 'd:t1']]);
    expect(BusNotifier.parse(sent[1]?.[0] as string)).toEqual({
      wake: true,
      tokens: [],
      types: ['a.one', 'episode.completed'],
    });
  });

  it('falls back to a wake-up every node reads when one wake-up named no types', async () => {
    const { sent, bus } = recorder();
    bus.wake(false, ['b.two']);
    bus.wake(true, ['a.one']);
    bus.wake(true);
    await bus.idle();
    expect(sent).toEqual([['t:["b.two"]'], ['']]);
  });

  it('falls back when the types do not fit in a payload or do not parse', async () => {
    const { sent, bus } = recorder();
    const many = Array.from({ length: 100 }, (_, i) => `type.${i}.${'x'.repeat(90)}`);
    bus.wake(false, many);
    await bus.idle();
    expect(sent).toEqual([['q:node-t']]);
    expect(BusNotifier.parse('t:not json')).toEqual({ wake: true, tokens: [], types: undefined });
    expect(BusNotifier.parse('t:[1]')).toEqual({ wake: true, tokens: [], types: undefined });
  });
});
