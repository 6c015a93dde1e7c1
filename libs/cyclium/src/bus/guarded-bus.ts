import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import { isDurable } from './durable-events.interface.js';
import { assertPublishableType } from './reserved-types.js';
import { HostTransactionError, type HostExecutors } from '../transactions/host-transaction.js';

/**
 * The `Bus` hosts inject: the configured transport, minus the library's reserved types on
 * `publish` (see reserved-types.ts). Subscribing to them is fine, and is how a host watches
 * episodes end. A publish with a `manager` goes through the host's transaction.
 */
export class GuardedBus extends Bus {
  constructor(
    private readonly transport: Bus,
    /** Absent: a publish with a `manager` is refused (a bus built outside the module). */
    private readonly transactions?: HostExecutors,
  ) {
    super();
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    try {
      assertPublishableType(type);
    } catch (error) {
      return Promise.reject(error);
    }
    if (options?.manager !== undefined) return this.publishWithin(type, payload, options);
    return this.transport.publish(type, payload, options);
  }

  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.transport.subscribe(type, handler);
  }

  private async publishWithin<P>(
    type: string,
    payload: P,
    options: PublishOptions,
  ): Promise<BusEvent<P>> {
    const { manager, ...rest } = options;
    const transport = this.transport;
    if (!isDurable(transport) || !transport.publishWithin || !this.transactions)
      throw new HostTransactionError(
        `Bus.publish("${type}", …, { manager }): this bus cannot store an event in the host's ` +
          `transaction; use bus: 'postgres'`,
      );
    const client = await this.transactions.executor(
      manager as NonNullable<PublishOptions['manager']>,
      `Bus.publish("${type}", …, { manager })`,
    );
    return transport.publishWithin(client, type, payload, rest);
  }
}
