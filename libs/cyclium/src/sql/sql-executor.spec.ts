import { describe, expect, it } from '@jest/globals';
import type { QueryConfig } from 'pg';
import { prepared, unnamedStatements, type SqlExecutor } from './sql-executor.js';

describe('unnamedStatements', () => {
  it('sends the same text and values without a statement name', async () => {
    const sent: unknown[][] = [];
    const executor = {
      query: (...args: unknown[]) => (sent.push(args), Promise.resolve({ rows: [] })),
    } as unknown as SqlExecutor;
    const unnamed = unnamedStatements(executor);
    await unnamed.query(prepared('events_append', 'SELECT $1::int')([1]));
    await unnamed.query('SELECT $1::int', [2]);
    expect((sent[0][0] as QueryConfig).name).toBeUndefined();
    expect(sent[0][0]).toMatchObject({ text: 'SELECT $1::int', values: [1] });
    expect(sent[1]).toEqual(['SELECT $1::int', [2]]);
  });
});
