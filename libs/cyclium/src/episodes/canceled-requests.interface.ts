/**
 * Where the wake-ups and runs for later of canceled episodes are ended (the dispatch room's
 * trigger requests): a seam, so the episodes room writes its cancels without importing dispatch.
 */
export interface CanceledRequests {
  /**
   * The body of a data-modifying CTE that completes the pending and scheduled requests of the
   * episodes CTE `canceled` (column `id`) lists: run in the cancel's own statement, so a cancel
   * never commits with its wake-ups still listed as due.
   */
  completeFor(canceled: string): string;
}

export const CANCELED_REQUESTS = Symbol('CYCLIUM_CANCELED_REQUESTS');
