import { Bus, type BusEvent, type BusHandler, type PublishOptions } from './bus.interface.js';
import { assertPublishableType } from './reserved-types.js';

/**
 * The `Bus` hosts inject: the configured transport, minus the library's reserved types on
 * `publish` (see reserved-types.ts). Subscribing to them is fine, and is how a host watches
 * episodes end.
 */
export class GuardedBus extends Bus {
  constructor(private readonly transport: Bus) {
    super();
  }

  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>> {
    try {
      assertPublishableType(type);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.transport.publish(type, payload, options);
  }

  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.transport.subscribe(type, handler);
  }
}
