import type { Statement } from '../sql/statement.js';
import type { Bus } from './bus.interface.js';
import type { EventScope } from './durable-events.interface.js';
import { readsLifecycle } from './lifecycle-reads.interface.js';

/** What ReadChecks needs of an outgoing event. */
interface Checked {
  type: string;
  ifRead?: boolean;
}

/**
 * The checks one statement makes of whether its events that are written only when read are read
 * (LifecycleReads): each a CTE of its own (`event_read_…`), so the statement's prepared name
 * differs from the same statement without them, and asked once however many rows test it. Its
 * columns tell, after the commit, which events were written, so nobody is woken for one that was
 * not.
 */
export class ReadChecks {
  /** By the 1-based position of an event written only if read: the checks any of which wrote it. */
  private readonly checks = new Map<number, string[]>();
  private readonly names: string[] = [];

  constructor(
    private readonly transport: Bus,
    private readonly statement: Statement,
  ) {}

  /**
   * For events written together (`fragment`): the condition under which they are written, when all
   * of them are written only if read (any reader of any of their types writes them all); null
   * otherwise, or on a bus that cannot tell.
   */
  together(events: readonly Checked[], scope: EventScope | undefined): string | null {
    if (!readsLifecycle(this.transport) || events.length === 0 || !events.every((e) => e.ifRead))
      return null;
    const types = [...new Set(events.map((e) => e.type))];
    const names = types.map((type, i) => this.check(`event_read_${i + 1}`, type, scope));
    events.forEach((_, i) => this.checks.set(i + 1, names));
    return `(${names.map((name) => `(SELECT yes FROM ${name})`).join(' OR ')})`;
  }

  /**
   * For one scope's events of a batch (`fragmentMany`; `positions` 1-based in the batch): the SQL
   * set `among` less the events written only if read whose type nobody reads.
   */
  among(
    events: readonly Checked[],
    positions: readonly number[],
    scope: EventScope | undefined,
    groupNo: number,
    among: string,
  ): string {
    if (!readsLifecycle(this.transport)) return among;
    const byType = new Map<string, number[]>();
    events.forEach((event, i) => {
      if (!event.ifRead) return;
      const at = byType.get(event.type) ?? [];
      at.push(positions[i] as number);
      byType.set(event.type, at);
    });
    if (byType.size === 0) return among;
    const p = (value: unknown, cast: string) => this.statement.param(value, cast);
    const always = positions.filter((_, i) => !events[i]?.ifRead);
    const read = [...byType].map(([type, at], i) => {
      const name = this.check(`event_read_${groupNo}_${i + 1}`, type, scope);
      for (const n of at) this.checks.set(n, [name]);
      return `(q.n = ANY(${p(at, 'int[]')}) AND (SELECT yes FROM ${name}))`;
    });
    return (
      `SELECT q.n FROM (${among}) q (n) ` +
      `WHERE q.n = ANY(${p(always, 'int[]')}) OR ${read.join(' OR ')}`
    );
  }

  /** `, (SELECT yes FROM c) AS c` per check: add them to the statement's final SELECT. */
  get columns(): string {
    return this.names.map((name) => `, (SELECT yes FROM ${name}) AS ${name}`).join('');
  }

  /**
   * Whether the event at `position` was written (given that its outcome was), by `row` of the
   * final SELECT; true without the row, or for an event written whenever its outcome is.
   */
  written(position: number, row: Readonly<Record<string, unknown>> | undefined): boolean {
    const names = this.checks.get(position);
    return !row || !names || names.some((name) => row[name] === true);
  }

  private check(name: string, type: string, scope: EventScope | undefined): string {
    const transport = this.transport;
    if (!readsLifecycle(transport)) throw new Error('ReadChecks: the bus cannot tell');
    this.statement.with(
      name,
      `SELECT ${transport.readCondition(this.statement, type, scope)} AS yes`,
    );
    this.names.push(name);
    return name;
  }
}
