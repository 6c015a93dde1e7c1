import { describe, expect, it } from '@jest/globals';
import { SharedRead } from './shared-read.js';

describe('SharedRead', () => {
  it(
    'shares one read per key within its age, and reads again after it or for another ' + 'key',
    async () => {
      const shared = new SharedRead<number, number>();
      let reads = 0;
      const read = () => Promise.resolve(++reads);
      expect(await Promise.all([shared.get(1, 60_000, read), shared.get(1, 60_000, read)])).toEqual(
        [1, 1],
      );
      expect(await shared.get(2, 60_000, read)).toBe(2);
      expect(await shared.get(2, 0, read)).toBe(3);
    },
  );

  it('hands a failed read to every caller within its age, and leaves none unhandled', async () => {
    const shared = new SharedRead<string, number>();
    const failing = shared.get('k', 60_000, () => Promise.reject(new Error('away')));
    await new Promise((resolve) => setImmediate(resolve));
    await expect(failing).rejects.toThrow('away');
    await expect(shared.get('k', 60_000, () => Promise.resolve(1))).rejects.toThrow('away');
  });
});
