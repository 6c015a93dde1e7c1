import { describe, expect, it, jest } from '@jest/globals';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { Statement } from '../sql/statement.js';
import { Bus, type BusEvent } from './bus.interface.js';
import type { DurableEvents, EventScope } from './durable-events.interface.js';
import { EventOutbox } from './event-outbox.service.js';
import type { LifecycleReads } from './lifecycle-reads.interface.js';

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

describe('EventOutbox.fragmentMany', () => {
  const restricted = (param: string) =>
    `SELECT p.n FROM (SELECT n FROM won) p (n) WHERE p.n = ANY(${param}::int[])`;

  it('writes a batch of two scopes as one body per scope, each woken on its own', () => {
    const many = jest.fn(
      (_s: Statement, events: readonly BusEvent[], positions: string, scope?: EventScope) =>
        `${scope?.stackSlug ?? 'own'}: ${events.length} events where ${positions}`,
    );
    const wake = jest.fn();
    const durableEvents: DurableEvents = {
      appendWithin: async () => undefined,
      appendFragment: () => '',
      appendManyFragment: many,
      wake,
    };
    const transport = Object.assign(Object.create(Bus.prototype) as Bus, durableEvents);
    const outbox = new EventOutbox(transport);
    const statement = new Statement('test');
    const own = { stackSlug: null, env: null };
    const other = { stackSlug: 'stack_a', env: null };
    const { bodies, announce } = outbox.fragmentMany(
      statement,
      [
        { type: 'episode.completed', payload: { episodeId: 'e1' }, scope: own },
        { type: 'episode.failed', payload: { episodeId: 'e2' }, scope: other },
        { type: 'episode.completed', payload: { episodeId: 'e3' }, scope: own },
      ],
      'SELECT n FROM won',
    );
    // Every body sees the whole batch (positions stay the batch's), restricted to its scope's.
    expect(bodies).toEqual([
      `own: 3 events where ${restricted('$1')}`,
      `stack_a: 3 events where ${restricted('$2')}`,
    ]);
    expect(statement.build('SELECT 1').values).toEqual([[1, 3], [2]]);
    announce([1, 2]);
    expect(wake.mock.calls).toEqual([
      [['episode.completed'], own],
      [['episode.failed'], other],
    ]);
  });

  it('keeps the positions as given when the batch has one scope', () => {
    const many = jest.fn((_s: Statement, _e: readonly BusEvent[], positions: string) => positions);
    const transport = Object.assign(Object.create(Bus.prototype) as Bus, {
      appendWithin: async () => undefined,
      appendFragment: () => '',
      appendManyFragment: many,
      wake: jest.fn(),
    } satisfies DurableEvents);
    const { bodies } = new EventOutbox(transport).fragmentMany(
      new Statement('test'),
      [
        { type: 'episode.completed', payload: {}, scope: { stackSlug: null, env: null } },
        { type: 'episode.completed', payload: {}, scope: { stackSlug: null, env: null } },
      ],
      'SELECT n FROM won',
    );
    expect(bodies).toEqual(['SELECT n FROM won']);
  });
});

describe('EventOutbox: events written only when read', () => {
  /** A durable transport that can tell who reads lifecycle events: its condition names the type. */
  function reading(wake = jest.fn()) {
    const appendFragment = jest.fn(
      (_s: Statement, _e: readonly BusEvent[], when: string) => `INSERT WHERE ${when}`,
    );
    const appendManyFragment = jest.fn(
      (_s: Statement, _e: readonly BusEvent[], positions: string) => positions,
    );
    const transport = Object.assign(Object.create(Bus.prototype) as Bus, {
      appendWithin: async () => undefined,
      appendFragment,
      appendManyFragment,
      wake,
      lifecycleReads: () => [],
      onLifecycleReads: () => () => undefined,
      lifecycleReadsStored: async () => undefined,
      subscribeUndeclared: () => () => undefined,
      readCondition: (_s: Statement, type: string) => `read(${type})`,
    } satisfies DurableEvents & LifecycleReads);
    return new EventOutbox(transport);
  }

  it('writes a lone end only where its type is read, and one that must be written as asked', () => {
    const outbox = reading();
    const statement = new Statement('test');
    const read = outbox.fragment(
      statement,
      [{ type: 'episode.completed', payload: {}, ifRead: true }],
      'won',
    );
    expect(read.body).toBe('INSERT WHERE (won) AND ((SELECT yes FROM event_read_1))');
    // The check is a CTE of its own, so the statement's prepared name differs from one without.
    expect(statement.build('SELECT 1').text).toBe(
      'WITH event_read_1 AS (SELECT read(episode.completed) AS yes)\nSELECT 1',
    );
    const always = outbox.fragment(
      new Statement('test'),
      [{ type: 'episode.completed', payload: {} }],
      'won',
    );
    expect(always.body).toBe('INSERT WHERE won');
  });

  it('wakes the channel after the commit only when the event was written', () => {
    const wake = jest.fn();
    const read = reading(wake).fragment(
      new Statement('test'),
      [{ type: 'episode.completed', payload: {}, ifRead: true }],
      'won',
    );
    expect(read.columns).toBe(', (SELECT yes FROM event_read_1) AS event_read_1');
    read.announce({ won: 1, event_read_1: false });
    expect(wake).not.toHaveBeenCalled();
    read.announce({ won: 1, event_read_1: true });
    expect(wake).toHaveBeenCalledTimes(1);
  });

  it('keeps in a batch the positions always written, the others where their type is read', () => {
    const statement = new Statement('test');
    const { bodies } = reading().fragmentMany(
      statement,
      [
        { type: 'episode.completed', payload: {}, ifRead: true },
        { type: 'episode.failed', payload: {}, ifRead: true },
        { type: 'episode.completed', payload: {} },
        { type: 'episode.completed', payload: {}, ifRead: true },
      ],
      'SELECT n FROM won',
    );
    expect(bodies).toEqual([
      'SELECT q.n FROM (SELECT n FROM won) q (n) WHERE q.n = ANY($3::int[]) OR ' +
        '(q.n = ANY($1::int[]) AND (SELECT yes FROM event_read_1_1)) OR ' +
        '(q.n = ANY($2::int[]) AND (SELECT yes FROM event_read_1_2))',
    ]);
    expect(statement.build('SELECT 1').values).toEqual([[1, 4], [2], [3]]);
  });

  it('wakes for the positions of a batch that were written, and no others', () => {
    const wake = jest.fn();
    const { announce } = reading(wake).fragmentMany(
      new Statement('test'),
      [
        { type: 'episode.completed', payload: {}, ifRead: true },
        { type: 'episode.failed', payload: {}, ifRead: true },
        { type: 'episode.completed', payload: {} },
      ],
      'SELECT n FROM won',
    );
    announce([1, 2, 3], { event_read_1_1: false, event_read_1_2: true });
    expect(wake.mock.calls).toEqual([[['episode.failed', 'episode.completed'], undefined]]);
  });
});
