import { describe, expect, it } from '@jest/globals';
import type { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { CycliumStatus } from './cyclium-status.service.js';

/** A CycliumStatus whose library connection answers `SELECT 1` as `answer` says. */
function statusOn(answer: () => Promise<unknown>) {
  const sent: number[] = [];
  const database = {
    dedicatedSql: {
      query: () => {
        sent.push(performance.now());
        return answer();
      },
    },
  } as unknown as CycliumDataSource;
  const none = undefined as never;
  const status = new CycliumStatus(none, database, none, none, none, none, none, none, none, none);
  return { status, sent };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('CycliumStatus.databasePing', () => {
  it('shares one unanswered SELECT 1 with later pings until it settles', async () => {
    let release: (() => void) | undefined;
    const { status, sent } = statusOn(
      () => new Promise<void>((resolve) => (release = () => resolve())),
    );
    const verdicts: Array<Promise<unknown>> = [];
    // A page asks every 0.5 s; the shared read keeps an answer 0.1 s here, so each ask is fresh.
    for (let i = 0; i < 4; i++) {
      verdicts.push(status.databasePing(100).then(String, (e: Error) => e.message));
      await sleep(500);
    }
    const answers = await Promise.all(verdicts);
    // One statement waits on the connection; each ping past 1.5 s since it was sent says so.
    expect(sent).toHaveLength(1);
    expect(answers.every((a) => a === 'no answer within 1500 ms')).toBe(true);
    release?.();
    await sleep(10);
    // Answered: the next ping sends a fresh statement and gets its round trip.
    const next = status.databasePing(100);
    release?.();
    await expect(next).resolves.toEqual(expect.any(Number));
    expect(sent).toHaveLength(2);
  });

  it('times a shared ping from when the statement was sent', async () => {
    const { status } = statusOn(() => new Promise(() => undefined));
    void status.databasePing(0).catch(() => undefined);
    await sleep(1_200);
    const started = performance.now();
    await expect(status.databasePing(0)).rejects.toThrow('no answer within 1500 ms');
    expect(performance.now() - started).toBeLessThan(700);
  });
});
