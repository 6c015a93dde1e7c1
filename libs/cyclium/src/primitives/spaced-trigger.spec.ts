import { describe, expect, it } from '@jest/globals';
import { SpacedTrigger } from './spaced-trigger.js';

describe('SpacedTrigger', () => {
  it(
    'runs at once after a quiet spell, then at most once per spacing however often it is ' +
      'asked',
    async () => {
      const runs: number[] = [];
      const started = performance.now();
      const trigger = new SpacedTrigger(
        async () => void runs.push(performance.now() - started),
        50,
        1,
      );
      trigger.request();
      await new Promise((r) => setImmediate(r));
      expect(runs).toHaveLength(1);
      expect(runs[0]).toBeLessThan(25); // no fixed wait when idle
      for (let i = 0; i < 20; i++) trigger.request();
      await trigger.idle();
      expect(runs).toHaveLength(2); // twenty requests inside the spacing: one more run
      // 50 ms apart by the bucket's clock; a loaded machine's timers have read 44 ms here (a fresh
      // clone's CI at load average 11), and a bucket that did not space would read about 0.
      expect((runs[1] as number) - (runs[0] as number)).toBeGreaterThanOrEqual(35);
    },
  );

  it('lets a burst through at once, then spaces the rest', async () => {
    let runs = 0;
    const trigger = new SpacedTrigger(async () => void runs++, 1_000, 3);
    for (let i = 0; i < 3; i++) {
      trigger.request();
      await trigger.idle();
    }
    expect(runs).toBe(3);
    trigger.request();
    await new Promise((r) => setTimeout(r, 30));
    expect(runs).toBe(3); // the bucket is empty: this one waits for a token
    await trigger.stop();
  });

  it('never overlaps runs, and a request during a run gets a run after it', async () => {
    let active = 0;
    let most = 0;
    let release!: () => void;
    const trigger = new SpacedTrigger(async () => {
      active++;
      most = Math.max(most, active);
      await new Promise<void>((r) => (release = r));
      active--;
    }, 1);
    trigger.request();
    await new Promise((r) => setImmediate(r));
    trigger.request();
    release();
    await new Promise((r) => setTimeout(r, 10));
    release();
    await trigger.idle();
    expect(most).toBe(1);
  });

  it('runs nothing after stop', async () => {
    let runs = 0;
    const trigger = new SpacedTrigger(async () => void runs++, 1_000, 1);
    trigger.request();
    await trigger.idle();
    trigger.request(); // would wait out the spacing
    await trigger.stop();
    trigger.request();
    await new Promise((r) => setTimeout(r, 20));
    expect(runs).toBe(1);
  });
});
