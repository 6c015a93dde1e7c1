import type { CycliumOutput } from './output.entity.js';

export interface DeliveryContext {
  /** The output's dedupe key: send it as the idempotency key to the system you deliver to. */
  idempotencyKey: string;
}

/** Implemented by `@OutputAdapter(type)` providers. The resolved value is stored as `delivered_ref`. */
export interface OutputDeliverer<P = unknown> {
  deliver(output: CycliumOutput & { payload: P }, context: DeliveryContext): Promise<unknown>;
}
