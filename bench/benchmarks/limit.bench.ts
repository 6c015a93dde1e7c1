import { randomUUID } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import pg from 'pg';
import { WARM_UP, printTable } from '../support/measure.js';
import { bootNode, runMany } from './episodes.bench.js';

/** Units per measured window, one at a time. */
const UNITS = 2_000;
const ROUNDS = 3;
/** Episodes the library runs before its first window, on top of WARM_UP. */
const NODE_WARM_UP = 3_000;

interface Captured {
  text: string;
  name: string;
  values: unknown[];
}

/**
 * `npm run bench -- limit`: how close one episode at a time can come to the three-commit floor
 * (a row inserted, then updated twice, three commits, as the side-by-side bench's floor), in one
 * run on one server, interleaved over three rounds (medians):
 *   - the two-commit floor (a row inserted, then updated);
 *   - the library's own two statements of a 1-step episode (its begin; its step and end in one),
 *     captured from a node and replayed on one bare connection, fresh ids each time: no library
 *     code runs, so this is what the data model alone allows;
 *   - the library: `Episodes.trigger` of a 1-step episode, waiting for its end, then the next.
 * A line that asks more of the library than its replay reaches asks for fewer or cheaper
 * statements, not for faster Node code.
 */
export async function limitBench(url: string): Promise<void> {
  const [begin, end] = await capture(url);
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  const app = await bootNode(url, { nodeIdentity: 'limit-library' });
  try {
    await client.query(
      'CREATE TABLE IF NOT EXISTS bench_commits (k text PRIMARY KEY, v int NOT NULL)',
    );
    let seq = 0;
    const lines: Array<[string, (units: number) => Promise<void>]> = [
      ['three-commit floor', (n) => commits(client, 3, n, () => `3:${seq++}`)],
      ['two-commit floor', (n) => commits(client, 2, n, () => `2:${seq++}`)],
      ['replay: the library statements on a bare client', (n) => replay(client, begin, end, n)],
      ['library: Episodes.trigger, 1 step, one at a time', (n) => runMany(app, 'k1', n, 1)],
    ];
    for (const [, run] of lines) await run(WARM_UP);
    // V8 optimises a function called once per episode only after a thousand calls or so: without
    // this, the first window measures the node's code half compiled.
    await runMany(app, 'k1', NODE_WARM_UP, 1);
    const times = new Map<string, number[]>(lines.map(([label]) => [label, []]));
    for (let round = 0; round < ROUNDS; round++)
      for (const [label, run] of lines) {
        const started = performance.now();
        await run(UNITS);
        times.get(label)?.push((performance.now() - started) / UNITS);
      }
    const floor = median(times.get('three-commit floor') ?? []);
    printTable(
      `One unit at a time (${UNITS} per window, median of ${ROUNDS} interleaved windows)`,
      lines.map(([label]) => {
        const ms = median(times.get(label) ?? []);
        return {
          unit: label,
          'ms per unit': ms.toFixed(3),
          'units/s': Math.round(1000 / ms),
          '÷ three-commit floor': (floor / ms).toFixed(2),
        };
      }),
    );
  } finally {
    await app.close();
    await client.end();
  }
}

/** `n` units of `count` sequential autocommits each: an insert, then updates of that row. */
async function commits(
  client: pg.Client,
  count: number,
  n: number,
  key: () => string,
): Promise<void> {
  for (let i = 0; i < n; i++) {
    const k = key();
    await client.query({
      name: 'limit_insert',
      text: 'INSERT INTO bench_commits (k, v) VALUES ($1, 0)',
      values: [k],
    });
    for (let u = 1; u < count; u++)
      await client.query({
        name: 'limit_update',
        text: 'UPDATE bench_commits SET v = $2 WHERE k = $1',
        values: [k, u],
      });
  }
}

/**
 * The first lone begin and lone end a node sends for a 1-step episode (prepared statements named
 * `cyclium_begin…` and `cyclium_end…`), recorded at pg's Client.query while it runs some.
 */
async function capture(url: string): Promise<[Captured, Captured]> {
  const found = new Map<'begin' | 'end', Captured>();
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called with each client as `this`, and put back
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as Partial<Captured> | string;
    if (typeof config === 'object' && config.name && config.text && config.values) {
      const kind = /^cyclium_begin/.test(config.name)
        ? 'begin'
        : /^cyclium_end/.test(config.name)
          ? 'end'
          : null;
      if (kind && !found.has(kind))
        found.set(kind, { name: config.name, text: config.text, values: config.values });
    }
    return original.apply(this, args);
  } as typeof pg.Client.prototype.query;
  let app: INestApplicationContext | undefined;
  try {
    app = await bootNode(url, { nodeIdentity: 'limit-capture' });
    await runMany(app, 'k1', 10, 1);
  } finally {
    pg.Client.prototype.query = original as typeof pg.Client.prototype.query;
    await app?.close();
  }
  const begin = found.get('begin');
  const end = found.get('end');
  if (!begin || !end) throw new Error('limit bench: no lone begin and end were sent');
  return [begin, end];
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

/** `value` with every uuid in its strings replaced through `fresh` (the same one for the same one). */
function renewed(value: unknown, fresh: Map<string, string>): unknown {
  if (typeof value === 'string')
    return value.replace(UUID, (id) => {
      if (!fresh.has(id)) fresh.set(id, randomUUID());
      return fresh.get(id) as string;
    });
  if (Array.isArray(value)) return value.map((v) => renewed(v, fresh));
  return value;
}

/** `n` episodes through the captured begin and end alone, each with ids of its own. */
async function replay(client: pg.Client, begin: Captured, end: Captured, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const fresh = new Map<string, string>();
    const values = (c: Captured) => c.values.map((v) => renewed(v, fresh));
    await client.query({ name: `limit_${begin.name}`, text: begin.text, values: values(begin) });
    const { rows } = await client.query<{ won: number | boolean }>({
      name: `limit_${end.name}`,
      text: end.text,
      values: values(end),
    });
    if (!rows[0]?.won) throw new Error('limit bench: a replayed end did not win its episode');
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}
