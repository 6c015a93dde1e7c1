import type { CycliumOutput } from '../entities/output.entity.js';

/** What an output adapter gets with each delivery attempt. */
export interface DeliveryContext {
  /**
   * The output's dedupe key, the same on every attempt and every node: send it as the idempotency
   * key to the system you deliver to (delivery is at least once).
   */
  idempotencyKey: string;
  /**
   * Aborts when the attempt runs past `deliveryTimeoutMs` or the node drains: stop and let the
   * attempt end.
   */
  signal: AbortSignal;
  /** 1 for the first attempt, counted across nodes. */
  attempt: number;
}

/**
 * Implemented by `@OutputAdapter(type)` providers. The resolved value is stored as `delivered_ref`.
 */
export interface OutputDeliverer<P = unknown> {
  /** Sends one output; at least once, so pass `context`'s dedupe key to the receiver. */
  deliver(output: CycliumOutput & { payload: P }, context: DeliveryContext): Promise<unknown>;
}
