import diagnosticsChannel from 'node:diagnostics_channel';
import { channelName, type CycliumEventMap, type CycliumEventName } from './telemetry.events.js';

/**
 * Subscribes to one Cyclium event on `node:diagnostics_channel`. Returns the unsubscribe function.
 * Events from every Cyclium node in this process arrive here; `ownerNode` tells them apart.
 */
export function onCyclium<E extends CycliumEventName>(
  event: E,
  handler: (metadata: CycliumEventMap[E]) => void,
): () => void {
  const name = channelName(event);
  const listener = (message: unknown) => handler(message as CycliumEventMap[E]);
  diagnosticsChannel.subscribe(name, listener);
  return () => {
    diagnosticsChannel.unsubscribe(name, listener);
  };
}
