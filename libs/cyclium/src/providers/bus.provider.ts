import {
  Inject,
  Injectable,
  type OnApplicationShutdown,
  type OnModuleInit,
  type Provider,
} from '@nestjs/common';
import { CYCLIUM_BUS_TRANSPORT, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { Peers } from '../cluster/peers.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { busChannel } from '../bus/bus-channel.js';
import { Bus } from '../bus/bus.interface.js';
import { GuardedBus } from '../bus/guarded-bus.js';
import { HostTransactions } from '../database/host-transactions.service.js';
import { listenConnectionConfig } from '../bus/listen-connection.js';
import { LocalBus } from '../bus/local-bus.js';
import { notifySpacingMs } from '../bus/notify-spacing.js';
import { READER_GRACE_SECONDS } from '../bus/lifecycle-reads.interface.js';
import { PostgresBus } from '../bus/postgres-bus.js';
import { positionFlushMs } from '../bus/position-flush.js';
import { RowSigner } from '../integrity/row-signer.service.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import type { BusObserver } from '../bus/postgres-bus-options.interface.js';

export const busTransportProvider: Provider = {
  provide: CYCLIUM_BUS_TRANSPORT,
  inject: [CYCLIUM_OPTIONS, CycliumDataSource, NodeIdentity, Peers, RowSigner, CycliumTelemetry],
  useFactory: (
    options: ResolvedCycliumOptions,
    database: CycliumDataSource,
    identity: NodeIdentity,
    peers: Peers,
    signer: RowSigner,
    telemetry: CycliumTelemetry,
  ): Bus => {
    if (options.bus === 'local') return new LocalBus();
    if (options.bus === 'postgres') {
      const channel = busChannel(options.stackSlug, options.env);
      // Read lazily: the host's DataSource is only looked up once every provider exists.
      return new PostgresBus(
        database.sql,
        () => listenConnectionConfig(database.connectionConfig(), options.listenUrl),
        {
          channel,
          observer: busObserver(telemetry, channel),
          stackSlug: options.stackSlug,
          env: options.env,
          publisher: () => identity.name(),
          pollIntervalMs: options.busPollIntervalMs,
          readersStaleSeconds: Math.max(
            READER_GRACE_SECONDS,
            (3 * options.nodeBeatIntervalMs) / 1000,
          ),
          echoIntervalMs: options.busEchoIntervalMs,
          echoTimeoutMs: options.busEchoTimeoutMs,
          // Not the host pool: a saturated pool must not delay the echo into a false verdict.
          echoSql: database.dedicatedSql,
          retentionMs: options.busRetentionMs,
          undispatchedMaxAgeMs: options.busUndispatchedMaxAgeMs,
          publishQueueMax: options.busPublishQueueMax,
          maxPayloadBytes: options.busMaxPayloadBytes,
          // Reads follow the wake-ups, so they keep the default spacing; the wake-ups grow with the
          // cluster.
          notifySpacingMs: () => notifySpacingMs(peers.size),
          positionFlushMs: () => positionFlushMs(peers.size, options.busUndispatchedMaxAgeMs),
          audience: peers,
          integrity: signer.enabled
            ? {
                sign: (channel, event) =>
                  signer.sign('event', [channel, event.eventId, event.type, event.payload]),
                verify: (channel, event, signature) =>
                  signer.verify(
                    'event',
                    [channel, event.eventId, event.type, event.payload],
                    signature,
                  ),
              }
            : undefined,
        },
      );
    }
    return options.bus;
  },
};

/** Bus counts as telemetry events, built only while someone listens. */
function busObserver(telemetry: CycliumTelemetry, channel: string): BusObserver {
  return {
    published: (count) => {
      if (telemetry.wants('bus.published')) telemetry.emit('bus.published', { channel, count });
    },
    read: (count) => {
      if (telemetry.wants('bus.read')) telemetry.emit('bus.read', { channel, count });
    },
  };
}

/**
 * What hosts inject as `Bus`: the transport, guarded against publishing the library's reserved
 * types.
 */
export const busProvider: Provider = {
  provide: Bus,
  inject: [CYCLIUM_BUS_TRANSPORT, HostTransactions],
  useFactory: (transport: Bus, transactions: HostTransactions): Bus =>
    new GuardedBus(transport, transactions),
};

interface Startable {
  start(): unknown;
}

interface Stoppable {
  stop(): unknown;
}

/**
 * Starts and stops the transport with the app. Duck-typed because a host's own Bus need not have
 * either method. Stopping waits for onApplicationShutdown: the bus must keep delivering while the
 * drain in beforeApplicationShutdown still runs, and its LISTEN connection is its own, not
 * TypeORM's.
 */
@Injectable()
export class BusLifecycle implements OnModuleInit, OnApplicationShutdown {
  constructor(
    @Inject(CYCLIUM_BUS_TRANSPORT) private readonly bus: Bus,
    private readonly database: CycliumDataSource,
  ) {}

  /**
   * A database away at boot (a failover) is waited for, as every boot step does
   * (CycliumDataSource.atBoot).
   */
  async onModuleInit(): Promise<void> {
    const bus = this.bus;
    if (!hasMethod<Startable>(bus, 'start')) return;
    await this.database.atBoot('starting the bus (LISTEN)', async () => bus.start());
  }

  async onApplicationShutdown(): Promise<void> {
    if (hasMethod<Stoppable>(this.bus, 'stop')) await this.bus.stop();
  }
}

function hasMethod<T extends object>(target: object, name: keyof T): target is T {
  return typeof (target as Record<PropertyKey, unknown>)[name] === 'function';
}
