import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import {
  sameAsCoalesced,
  sameEnv,
  sameEnvIndexed,
  sameStack,
  stackCovers,
  stackFilter,
} from '../libs/cyclium/src/scope/scope-predicates.js';
import { serverUrl } from './support/database.js';

type Value = string | null;
const VALUES: Value[] = [null, 'a', 'b'];

/**
 * What each predicate means for every pair of a row's value and the one compared with, NULL (the
 * default stack or env) included, as Postgres evaluates it in a WHERE clause.
 */
describe('scope predicates', () => {
  let client: pg.Client;

  beforeAll(async () => {
    client = new pg.Client({ connectionString: serverUrl() });
    await client.connect();
  });

  afterAll(async () => {
    await client?.end();
  });

  /** Whether the predicate keeps the row, for each row value, compared with `value` as parameter $1. */
  async function holds(predicate: string, value: Value): Promise<boolean[]> {
    const { rows } = await client.query<{ hit: boolean }>(
      `SELECT (${predicate}) IS TRUE AS hit FROM unnest(ARRAY[NULL, 'a', 'b']::text[]) WITH ORDINALITY AS t (c, n) ORDER BY n`,
      [value],
    );
    return rows.map((r) => r.hit);
  }

  const cases: Array<[string, (value: Value) => string, (row: Value, value: Value) => boolean]> = [
    ['sameEnv', () => sameEnv('t.c', '$1::text'), (row, value) => row === value],
    ['sameStack', () => sameStack('t.c', '$1::text'), (row, value) => row === value],
    [
      'sameEnvIndexed',
      (value) => sameEnvIndexed('t.c', '$1', value),
      (row, value) => row === value,
    ],
    ['sameAsCoalesced', () => sameAsCoalesced('t.c', '$1::text'), (row, value) => row === value],
    [
      'stackCovers',
      () => stackCovers('t.c', '$1'),
      (row, value) => value === null || row === null || row === value,
    ],
    [
      'stackFilter',
      () => stackFilter('t.c', '$1'),
      (row, value) => value === null || row === value,
    ],
  ];

  for (const [name, render, meaning] of cases) {
    it(`${name}: NULL as a value like the others`, async () => {
      for (const value of VALUES) {
        expect({ value, hits: await holds(render(value), value) }).toEqual({
          value,
          hits: VALUES.map((row) => meaning(row, value)),
        });
      }
    });
  }

  it('stackCovers between two columns (a node and a row) is the same overlap', async () => {
    const { rows } = await client.query<{ a: string | null; b: string | null; hit: boolean }>(
      `SELECT x AS a, y AS b, (${stackCovers('y', 'x')}) IS TRUE AS hit
         FROM unnest(ARRAY[NULL, 'a', 'b']::text[]) x CROSS JOIN unnest(ARRAY[NULL, 'a', 'b']::text[]) y`,
    );
    expect(rows).toHaveLength(9);
    for (const { a, b, hit } of rows)
      expect({ a, b, hit }).toEqual({ a, b, hit: a === null || b === null || a === b });
  });
});
