import { Injectable } from '@nestjs/common';
import diagnosticsChannel, { type Channel } from 'node:diagnostics_channel';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { channelName, type CycliumEventMap, type CycliumEventName } from './telemetry.events.js';

type Metadata<E extends CycliumEventName> = Omit<CycliumEventMap[E], 'ownerNode'>;

const channels = new Map<CycliumEventName, Channel>();

function channelFor(event: CycliumEventName): Channel {
  let channel = channels.get(event);
  if (!channel) {
    channel = diagnosticsChannel.channel(channelName(event));
    channels.set(event, channel);
  }
  return channel;
}

/**
 * Publishes the catalogue's events, stamped with this node's identity. Free when nobody listens.
 */
@Injectable()
export class CycliumTelemetry {
  constructor(private readonly identity: NodeIdentity) {}

  /**
   * True while someone listens to `event`: an emit site whose metadata costs something to build
   * asks first.
   */
  wants(event: CycliumEventName): boolean {
    return channelFor(event).hasSubscribers;
  }

  emit<E extends CycliumEventName>(event: E, metadata: Metadata<E>): void {
    const channel = channelFor(event);
    if (!channel.hasSubscribers) return;
    channel.publish({ ...metadata, ownerNode: this.identity.name() });
  }
}
