import { describe, expect, it } from '@jest/globals';
import { CycliumStartupError } from './startup-errors.js';
import { StartupWait, worthWaitingFor } from './startup-wait.js';

const pgError = (code: string, message = code) => Object.assign(new Error(message), { code });

describe('StartupWait', () => {
  it('waits out what a failover throws, and nothing waiting cannot fix', () => {
    const waited = [
      'ECONNREFUSED',
      'ECONNRESET',
      'ETIMEDOUT',
      'EAI_AGAIN',
      '57P01',
      '57P03',
      '25006',
      '08006',
    ];
    for (const code of waited) {
      expect([code, worthWaitingFor(pgError(code))]).toEqual([code, true]);
    }
    expect(worthWaitingFor(new Error('Connection terminated unexpectedly'))).toBe(true);
    for (const code of [
      '28P01',
      '28000',
      '3D000',
      'ENOTFOUND',
      'ERR_INVALID_URL',
      '42P01',
      '23505',
    ]) {
      expect([code, worthWaitingFor(pgError(code))]).toEqual([code, false]);
    }
    expect(worthWaitingFor(new Error('a bug'))).toBe(false);
  });

  it('pauses 1 s doubling to 10 s between attempts, and never past startupWaitMs', async () => {
    const pauses: number[] = [];
    const lines: string[] = [];
    let calls = 0;
    const wait = new StartupWait(
      60_000,
      (line) => lines.push(line),
      (ms) => {
        pauses.push(ms);
        return Promise.resolve();
      },
    );
    expect(
      await wait.run('registering the node', async () => {
        if (++calls <= 7)
          throw pgError('57P01', 'terminating connection due to administrator command');
        return 'registered';
      }),
    ).toBe('registered');
    expect(pauses).toEqual([1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
    expect(lines[0]).toMatch(
      /^registering the node: the database is not available yet \(terminating connection /,
    );
    expect(lines[0]).toMatch(
      /command\); waited 0 s, trying again in 1 s, until .*Z \(startupWaitMs 60000\)/,
    );
  });

  it(
    'fails boot with CycliumStartupError once startupWaitMs has passed, at once for a ' + 'refusal',
    async () => {
      const wait = new StartupWait(0, () => undefined);
      const down = () => Promise.reject(pgError('ECONNREFUSED', 'connect ECONNREFUSED'));
      const failure = await wait.run('checking the schema', down).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(CycliumStartupError);
      const said =
        'checking the schema: the database is not available (connect ECONNREFUSED); gave up ' +
        'after ' +
        'waiting 0 s';
      expect((failure as Error).message).toContain(said);
      const refusal = pgError('28P01', 'password authentication failed');
      const patient = new StartupWait(60_000, () => undefined);
      await expect(patient.run('x', () => Promise.reject(refusal))).rejects.toBe(refusal);
    },
  );
});
