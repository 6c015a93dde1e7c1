import { Inject, Injectable } from '@nestjs/common';
import { dropPosition } from '../bus/bus-positions.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import {
  ClusterStatusReader,
  hosts,
  type BusConsumerStatus,
  type ClusterNode,
} from './cluster-status.service.js';

/**
 * What `BusConsumers.drop` did: `hosted` when a live node of its channel hosts it (nothing was
 * deleted).
 */
export type BusConsumerDrop = 'dropped' | 'hosted' | 'not_found';

const NODES = `
  SELECT stack, env, actors, last_seen_at > now() - make_interval(secs => $1::float8 / 1000) AS live
    FROM cyclium_nodes`;

type NodeRow = Pick<ClusterNode, 'stack' | 'env' | 'actors' | 'live'>;

/**
 * The bus positions of the cluster, for operators. A position whose expectation was removed or
 * renamed is never stored again, and holds its channel's events of its type until
 * `busUndispatchedMaxAgeMs`; `drop` deletes it. A position a live node hosts is refused: its next
 * replay would start from that node's boot instead. Should a node hosting it boot meanwhile, its
 * next write stores the row again.
 */
@Injectable()
export class BusConsumers {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly reader: ClusterStatusReader,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** Every stored position, with `hosted` (see CycliumStatus.cluster()). */
  async list(): Promise<BusConsumerStatus[]> {
    return (await this.reader.read(300_000, 500)).busConsumers;
  }

  /**
   * Deletes the stored position of `consumer` (`<actor id>.<expectation id>`) on `channel`, unless
   * it is hosted.
   */
  async drop(channel: string, consumer: string): Promise<BusConsumerDrop> {
    const liveFor = [2 * this.options.nodeBeatIntervalMs];
    const { rows } = await this.database.sql.query<NodeRow>(NODES, liveFor);
    if (hosts(rows, { channel, consumer })) return 'hosted';
    return (await dropPosition(this.database.sql, channel, consumer)) ? 'dropped' : 'not_found';
  }
}
