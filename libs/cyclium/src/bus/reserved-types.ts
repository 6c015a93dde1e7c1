import { InvalidBusEventError } from './bus-errors.js';

/**
 * Types only the library publishes: its lifecycle events (`episode.*`) and its own messages
 * (`cyclium.*`, the cancel request among them). A host publishing one would fake an episode's
 * outcome for every listener, the workflow engine included.
 */
const RESERVED_PREFIXES = ['episode.', 'cyclium.'] as const;

export function isReservedType(type: string): boolean {
  return RESERVED_PREFIXES.some((prefix) => type.startsWith(prefix));
}

/** Throws unless `type` is a concrete type a host may publish. */
export function assertPublishableType(type: unknown): asserts type is string {
  if (typeof type !== 'string' || type === '' || type === '*') {
    throw new InvalidBusEventError(
      `bus: cannot publish an event of type ${JSON.stringify(type)}; give it a concrete, ` +
        `non-empty type`,
      'type',
    );
  }
  if (isReservedType(type)) {
    throw new InvalidBusEventError(
      `bus: "${type}" is reserved for the library ` +
        `(${RESERVED_PREFIXES.map((p) => `${p}*`).join(', ')}); publish your own type instead`,
      'type',
    );
  }
}
