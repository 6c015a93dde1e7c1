import { describe, expect, it } from '@jest/globals';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { BusSignals } from './bus-signals.js';

describe('BusSignals hearing a wake-up', () => {
  function signals(wanted: readonly string[]) {
    let reads = 0;
    const sql = { query: async () => ({ rows: [] }) } as unknown as SqlExecutor;
    const bus = new BusSignals(
      sql,
      'cyclium_bus',
      0,
      () => 'node-s',
      undefined,
      () => 'node-s',
      () => reads++,
      (type) => wanted.includes(type),
    );
    return { bus, reads: () => reads };
  }

  it('reads when a handler here wants one of the types named, and not otherwise', () => {
    const { bus, reads } = signals(['a.one']);
    bus.hear({ wake: true, tokens: [], types: ['episode.completed'] });
    expect(reads()).toBe(0);
    bus.hear({ wake: true, tokens: [], types: ['episode.completed', 'a.one'] });
    expect(reads()).toBe(1);
  });

  it('reads a wake-up that names no types, unless it names this node as the one to skip', () => {
    const { bus, reads } = signals([]);
    bus.hear({ wake: true, tokens: [] });
    expect(reads()).toBe(1);
    bus.hear({ wake: true, tokens: [], notFor: 'node-s' });
    expect(reads()).toBe(1);
  });
});
