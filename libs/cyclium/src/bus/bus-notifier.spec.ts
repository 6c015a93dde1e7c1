import { describe, expect, it } from '@jest/globals';
import type { QueryConfig } from 'pg';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { BusNotifier, notifyPayloads, type Heard } from './bus-notifier.js';

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
      const sent: string[][] = [];
      const sql = {
        query: async (config: QueryConfig) => {
          sent.push((config.values as [string, string[]])[1]);
          return { rows: [] };
        },
      } as unknown as SqlExecutor;
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
    const sent: string[][] = [];
    const heardLocally: Heard[] = [];
    const sql = {
      query: async (config: QueryConfig) => {
        sent.push((config.values as [string, string[]])[1]);
        return { rows: [] };
      },
    } as unknown as SqlExecutor;
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
