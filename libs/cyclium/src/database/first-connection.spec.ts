import { describe, expect, it } from '@jest/globals';
import type { DataSource } from 'typeorm';
import { connectAtBoot } from './first-connection.js';
import { CycliumStartupError } from './startup-errors.js';
import { StartupWait } from './startup-wait.js';

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

/** A wait of `waitMs` whose pauses take no time, and the lines it warned. */
function quickWait(waitMs = 120_000) {
  const warnings: string[] = [];
  return {
    wait: new StartupWait(
      waitMs,
      (line) => warnings.push(line),
      () => Promise.resolve(),
    ),
    warnings,
  };
}

describe('connectAtBoot', () => {
  it(
    'fails at once on a refusal no retry cures, naming who connected where and not the ' +
      'password',
    async () => {
      for (const [error, said] of [
        [
          pgError('28P01', 'password authentication failed for user "app"'),
          'password authentication failed for user "app"',
        ],
        [pgError('3D000', 'database "orders" does not exist'), 'database "orders" does not exist'],
        [
          Object.assign(pgError('ENOTFOUND', 'getaddrinfo ENOTFOUND db.internal'), {
            hostname: 'db.internal',
          }),
          'database host "db.internal" not found',
        ],
      ] as const) {
        const source = dataSource([error]);
        const { wait, warnings } = quickWait();
        const failure = await connectAtBoot(source, wait).catch((e: unknown) => e);
        expect(failure).toBeInstanceOf(CycliumStartupError);
        expect((failure as Error).message).toBe(
          `${said} (user app at db.internal:6543, database orders)`,
        );
        expect((failure as Error).stack).not.toContain('\n');
        expect({ calls: source.calls, warnings }).toEqual({ calls: 1, warnings: [] });
      }
    },
  );

  it('names a url that is not a postgres URL before trying it', async () => {
    const source = dataSource([], { type: 'postgres', url: 'not a url' });
    const said = 'the DataSource url is not a postgres:// or postgresql:// connection URL';
    await expect(connectAtBoot(source, quickWait().wait)).rejects.toThrow(said);
    expect(source.calls).toBe(0);
  });

  it(
    'waits out a server that is not up yet, one line per attempt, and connects once it ' + 'is',
    async () => {
      const source = dataSource([
        pgError('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:6543'),
        pgError('57P03', 'the database system is starting up'),
        pgError('25006', 'cannot execute INSERT in a read-only transaction'),
      ]);
      const { wait, warnings } = quickWait();
      await connectAtBoot(source, wait);
      expect(source.calls).toBe(4);
      expect(warnings).toEqual([
        expect.stringMatching(
          new RegExp(
            '^connecting \\(user app at db.internal:6543, database orders\\): the database is ' +
              'not ' +
              'available yet ' +
              '\\(connect ECONNREFUSED 10\\.0\\.0\\.1:6543\\); waited 0 s, trying again in 1 s, ' +
              'until \\S+Z \\(startupWaitMs 120000\\)$',
          ),
        ),
        expect.stringContaining(
          '(the database system is starting up); waited 0 s, trying again in 2 s',
        ),
        expect.stringContaining(
          '(cannot execute INSERT in a read-only transaction); waited 0 s, trying again in 4 s',
        ),
      ]);
    },
  );

  it(
    'gives up after startupWaitMs, and passes an error it cannot classify on as it ' + 'is',
    async () => {
      const refused = pgError('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:6543');
      const down = dataSource(Array.from({ length: 1000 }, () => refused));
      const failure = await connectAtBoot(down, new StartupWait(30, () => undefined)).catch(
        (e: unknown) => e,
      );
      expect(failure).toBeInstanceOf(CycliumStartupError);
      expect((failure as Error).message).toMatch(
        /^connecting \(.*\): the database is not available \(connect/,
      );
      expect((failure as Error).message).toMatch(
        /; gave up after waiting .* \(startupWaitMs 30\)$/,
      );
      const odd = new Error('something else');
      await expect(connectAtBoot(dataSource([odd]), quickWait().wait)).rejects.toBe(odd);
    },
  );
});
