/** An event as every node receives it: the publisher mints `eventId` once. */
export interface BusEvent<P = unknown> {
  type: string;
  eventId: string;
  payload: P;
  publishedAt: string;
}

export interface PublishOptions {
  /** Reuse an id the caller already has (a webhook delivery id, say); minted when absent. */
  eventId?: string;
}

export type BusHandler<P = unknown> = (event: BusEvent<P>) => void | Promise<void>;

/** How events travel between nodes. Implement it to bring your own transport. */
export interface Bus {
  publish<P>(type: string, payload: P, options?: PublishOptions): Promise<BusEvent<P>>;
  /** Returns the unsubscribe function. `'*'` receives every event. */
  subscribe<P>(type: string, handler: BusHandler<P>): () => void;
}
