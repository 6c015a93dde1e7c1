import { describe, expect, it } from '@jest/globals';
import { GroupCommit, type Pending } from './group-commit.js';

/** A send the test finishes by hand, recording each batch. */
function controlledSend() {
  const batches: number[][] = [];
  const finish: Array<() => void> = [];
  const send = (batch: Array<Pending<number>>) => {
    batches.push(batch.map((p) => p.item));
    return new Promise<void>((resolve) => {
      finish.push(() => {
        for (const p of batch) p.resolve();
        resolve();
      });
    });
  };
  return { batches, finish, send };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('GroupCommit', () => {
  it('sends a lone item at once, without waiting for company', async () => {
    const { batches, finish, send } = controlledSend();
    const queue = new GroupCommit(send);
    const done = queue.add(1);
    await turn();
    expect(batches).toEqual([[1]]);
    finish[0]?.();
    await done;
  });

  it('coalesces what arrives while a send is in flight into the next one, in order', async () => {
    const { batches, finish, send } = controlledSend();
    const queue = new GroupCommit(send);
    const first = queue.add(1);
    void queue.add(2); // same turn: same batch (settles with `first`)
    await turn();
    const later = [queue.add(3), queue.add(4), queue.add(5)];
    await turn();
    expect(batches).toEqual([[1, 2]]); // nothing overlaps the send in flight
    finish[0]?.();
    await first;
    await turn();
    await turn();
    expect(batches).toEqual([
      [1, 2],
      [3, 4, 5],
    ]);
    finish[1]?.();
    await Promise.all(later);
    await queue.idle();
  });

  it('rejects the items a failed send left unsettled, and keeps going', async () => {
    const sent: number[][] = [];
    const queue = new GroupCommit<number>(async (batch) => {
      sent.push(batch.map((p) => p.item));
      if (batch.some((p) => p.item === 1)) {
        batch[0]?.resolve();
        throw new Error('boom');
      }
      for (const p of batch) p.resolve();
    });
    const a = queue.add(0);
    const b = queue.add(1);
    await expect(a).resolves.toBeUndefined();
    await expect(b).rejects.toThrow('boom');
    await expect(queue.add(2)).resolves.toBeUndefined();
    expect(sent).toEqual([[0, 1], [2]]);
  });

  it(
    'lets up to maxInFlight sends overlap, and coalesces what arrives while all of them are ' +
      'busy',
    async () => {
      const { batches, finish, send } = controlledSend();
      const queue = new GroupCommit(send, 2);
      const first = queue.add(1);
      await turn();
      const second = queue.add(2);
      await turn();
      expect(batches).toEqual([[1], [2]]); // the second did not wait for the first
      const later = [queue.add(3), queue.add(4)];
      await turn();
      expect(batches).toEqual([[1], [2]]); // both busy: 3 and 4 wait together
      finish[1]?.();
      await second;
      await turn();
      await turn();
      expect(batches).toEqual([[1], [2], [3, 4]]);
      finish[0]?.();
      finish[2]?.();
      await Promise.all([first, ...later]);
      await queue.idle();
    },
  );

  it(
    'with a bound, refuses at once what would hold more than max items, queued or in ' + 'flight',
    async () => {
      const { batches, finish, send } = controlledSend();
      const queue = new GroupCommit(send, 1, {
        max: 3,
        refuse: (item: number) => new Error(`full, refused ${item}`),
      });
      const first = queue.add(1);
      await turn();
      expect(batches).toEqual([[1]]); // in flight, still held
      const waiting = [queue.add(2), queue.add(3)];
      await expect(queue.add(4)).rejects.toThrow('full, refused 4');
      expect(queue.held).toBe(3);
      finish[0]?.();
      await first;
      await turn();
      await turn();
      expect(batches).toEqual([[1], [2, 3]]); // the refused one never left
      const room = queue.add(5); // 2 and 3 are in flight: there is room for one more
      await expect(queue.add(6)).rejects.toThrow('full, refused 6');
      finish[1]?.();
      await Promise.all(waiting);
      await turn();
      await turn();
      finish[2]?.();
      await room;
      await queue.idle();
      expect(batches).toEqual([[1], [2, 3], [5]]);
      expect(queue.held).toBe(0);
    },
  );
});
