import { describe, expect, it } from '@jest/globals';
import type { DataSource } from 'typeorm';
import { connectAtBoot, CycliumStartupError } from './first-connection.js';

const URL_OPTIONS = { type: 'postgres', url: 'postgres://app:secret@db.internal:6543/orders' };

/** A DataSource whose initialize fails with each of `failures` in turn, then succeeds. */
function dataSource(failures: Error[], options: object = URL_OPTIONS) {
  let calls = 0;
  return {
    options,
    get calls() {
      return calls;
    },
    initialize: () => {
      const failure = failures[calls++];
      return failure === undefined ? Promise.resolve() : Promise.reject(failure);
    },
  } as unknown as DataSource & { calls: number };
}

const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('connectAtBoot', () => {
  it('fails at once on a refusal no retry cures, naming who connected where and not the password', async () => {
    for (const [error, said] of [
      [pgError('28P01', 'password authentication failed for user "app"'), 'password authentication failed for user "app"'],
      [pgError('3D000', 'database "orders" does not exist'), 'database "orders" does not exist'],
      [Object.assign(pgError('ENOTFOUND', 'getaddrinfo ENOTFOUND db.internal'), { hostname: 'db.internal' }), 'database host "db.internal" not found'],
    ] as const) {
      const source = dataSource([error]);
      const warnings: string[] = [];
      const failure = await connectAtBoot(source, (line) => warnings.push(line), 5, 1).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(CycliumStartupError);
      expect((failure as Error).message).toBe(`${said} (user app at db.internal:6543, database orders)`);
      expect((failure as Error).stack).not.toContain('\n');
      expect({ calls: source.calls, warnings }).toEqual({ calls: 1, warnings: [] });
    }
  });

  it('names a url that is not a postgres URL before trying it', async () => {
    const source = dataSource([], { type: 'postgres', url: 'not a url' });
    await expect(connectAtBoot(source, () => undefined)).rejects.toThrow('the DataSource url is not a postgres:// or postgresql:// connection URL');
    expect(source.calls).toBe(0);
  });

  it('retries a server that is not up yet, one line per attempt, and connects once it is', async () => {
    const source = dataSource([pgError('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:6543'), pgError('57P03', 'the database system is starting up')]);
    const warnings: string[] = [];
    await connectAtBoot(source, (line) => warnings.push(line), 5, 1);
    expect(source.calls).toBe(3);
    expect(warnings).toEqual([
      'the database is not accepting connections yet (connect ECONNREFUSED 10.0.0.1:6543; user app at db.internal:6543, database orders); attempt 1 of 5, retrying in 0.001 s',
      'the database is not accepting connections yet (the database system is starting up; user app at db.internal:6543, database orders); attempt 2 of 5, retrying in 0.001 s',
    ]);
  });

  it('gives up after its attempts, and passes an error it cannot classify on as it is', async () => {
    const refused = pgError('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:6543');
    const down = dataSource([refused, refused, refused]);
    await expect(connectAtBoot(down, () => undefined, 3, 1)).rejects.toThrow(/not accepting connections .* gave up after 3 attempts/);
    const odd = new Error('something else');
    await expect(connectAtBoot(dataSource([odd]), () => undefined, 3, 1)).rejects.toBe(odd);
  });
});
