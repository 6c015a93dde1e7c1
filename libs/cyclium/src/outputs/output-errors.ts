/**
 * The abort reason of an attempt that ran past `deliveryTimeoutMs`: it counts as a failed attempt.
 */
export class DeliveryTimeoutError extends Error {
  override readonly name = 'DeliveryTimeoutError';

  constructor(timeoutMs: number) {
    super(`delivery did not finish within ${timeoutMs} ms (deliveryTimeoutMs)`);
  }
}

/**
 * The abort reason of an attempt the drain cut short: not a failure, the row is released for
 * another node.
 */
export class DeliveryInterruptedError extends Error {
  override readonly name = 'DeliveryInterruptedError';

  constructor() {
    super('delivery interrupted: the node is shutting down');
  }
}
