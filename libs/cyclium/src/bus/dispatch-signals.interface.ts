/**
 * A best-effort side channel between the nodes of one bus channel: "these triggers are handled",
 * so the nodes waiting as backups for them stand down. Not durable, and it need not be: a signal
 * that never arrives costs one more dedupe attempt, which the unique index turns away. A bus
 * without it (a host's own) keeps every node racing for every trigger.
 */
export interface DispatchSignals {
  /**
   * Tells every node of the channel, this one included, that the triggers with these tokens are
   * handled.
   */
  signalDispatched(tokens: readonly string[]): void;
  /**
   * Calls `handler` with the tokens other nodes (and this one) signal; returns the unsubscribe
   * function.
   */
  onDispatched(handler: (tokens: readonly string[]) => void): () => void;
}

export function hasDispatchSignals(bus: object): bus is DispatchSignals {
  const candidate = bus as Partial<DispatchSignals>;
  return (
    typeof candidate.signalDispatched === 'function' && typeof candidate.onDispatched === 'function'
  );
}
