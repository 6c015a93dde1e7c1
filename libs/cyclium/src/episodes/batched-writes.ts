import { GroupCommit, type Pending } from '../primitives/group-commit.js';
import { isDatabaseUnavailable } from '../sql/database-errors.js';

/**
 * Batches one kind of write keeps in flight at once: fewer than a node's episodes, so each batch
 * still serves several.
 */
const IN_FLIGHT = 4;

/**
 * What a batched statement answers: one result per item, in order, or `alone` when every item must
 * be written by itself.
 */
export type BatchAnswer<R> = R[] | 'alone';

interface Slot<T, R> {
  item: T;
  result?: R;
}

/**
 * Group-committed writes of one kind (steps, begins, ends): the writes that arrive while one is in
 * flight leave together through `many`, a lone write goes out at once through `one`. A batch that
 * PostgreSQL refuses for any reason but being away (a bad value, a deadlock), or that `many`
 * answers `alone`, is written again one by one, so each write gets the answer it would have had
 * alone and only the write at fault fails.
 */
export class BatchedWrites<T, R> {
  private readonly batches = new GroupCommit<Slot<T, R>>((batch) => this.send(batch), IN_FLIGHT);

  constructor(
    private readonly one: (item: T) => Promise<R>,
    private readonly many: (items: T[]) => Promise<BatchAnswer<R>>,
  ) {}

  async write(item: T): Promise<R> {
    const slot: Slot<T, R> = { item };
    await this.batches.add(slot);
    return slot.result as R;
  }

  private async send(batch: Array<Pending<Slot<T, R>>>): Promise<void> {
    if (batch.length === 1) return this.sendOne(batch[0] as Pending<Slot<T, R>>);
    let answer: BatchAnswer<R> = 'alone';
    try {
      answer = await this.many(batch.map((pending) => pending.item.item));
    } catch (error) {
      // Away is away for every write alike; anything else may be one write's fault.
      if (isDatabaseUnavailable(error)) throw error;
    }
    if (answer === 'alone') {
      await Promise.all(batch.map((pending) => this.sendOne(pending)));
      return;
    }
    const results = answer;
    batch.forEach((pending, i) => {
      pending.item.result = results[i];
      pending.resolve();
    });
  }

  private async sendOne(pending: Pending<Slot<T, R>>): Promise<void> {
    try {
      pending.item.result = await this.one(pending.item.item);
      pending.resolve();
    } catch (error) {
      pending.reject(error);
    }
  }
}
