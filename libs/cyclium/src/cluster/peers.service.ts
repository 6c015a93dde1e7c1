import { Inject, Injectable, Optional } from '@nestjs/common';
import { createHash } from 'node:crypto';
import type { BusAudience } from '../bus/bus-audience.interface.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { NodeIdentity } from '../identity/node-identity.service.js';

/**
 * The live nodes that hear this node's bus channel and can take a trigger (same stack and env,
 * not disabled), as of this node's last beat, and a ranking of them per trigger that every node
 * with the same list computes alike (rendezvous hashing): rank 0 dispatches at once, the others
 * stand by in rank order. A list that differs between nodes for a while (a node joined or died
 * since someone's last beat) costs an extra attempt or a backup's delay, never an episode: the
 * dedupe index still decides who runs it.
 *
 * The node table is writable by anyone who can write the shared tables, so no row count stretches a
 * wait without bound: the size that sets the NOTIFY spacing counts at most MAX_COUNTED_NODES, and a
 * rank is at most MAX_RANK (nodes further down all stand by as the last rank, and the dedupe index
 * decides among them). A hundred forged rows cost a 2.25 s spacing and three backup steps, not
 * minutes.
 *
 * It also knows who else listens on the channel at all (any mode), so a lone node skips its NOTIFYs
 * (BusAudience). A node that announced it started listening counts until a look at the node table
 * shows its row, or for three beat intervals if it never registers.
 */
/** Nodes counted for the NOTIFY spacing at most: 10 ms × 15² = 2.25 s (see notifySpacingMs). */
export const MAX_COUNTED_NODES = 16;
/** The last rank: a node with more nodes ahead of it stands by as this one. */
export const MAX_RANK = 3;

@Injectable()
export class Peers implements BusAudience {
  private others: readonly Peer[] = [];
  /**
   * Read on every NOTIFY run (its spacing follows the cluster's size): computed once per update.
   */
  private count = 1;
  /** Null until the first look at the node table: until then nobody is known to be alone. */
  private otherListeners: number | null = null;
  /** Nodes heard announcing themselves, by when, that the node table has not shown yet. */
  private readonly joiners = new Map<string, number>();
  private readonly joinGraceMs: number;

  constructor(
    private readonly identity: NodeIdentity,
    @Optional() @Inject(CYCLIUM_OPTIONS) options?: ResolvedCycliumOptions,
  ) {
    this.joinGraceMs = 3 * (options?.nodeBeatIntervalMs ?? 15_000);
  }

  /** This node and the others, sorted. */
  list(): string[] {
    return [...new Set([...this.others.map((p) => p.identity), this.identity.name()])].sort();
  }

  get size(): number {
    return this.count;
  }

  /**
   * Replaces the list (NodeRegistry, at registration and every beat): `peers` take triggers,
   * `listeners` are every live node of the channel, whatever its mode.
   */
  update(
    peers: readonly Peer[],
    listeners: readonly string[] = peers.map((p) => p.identity),
  ): void {
    const me = this.identity.name();
    this.others = peers.filter((peer) => peer.identity !== me);
    this.count = Math.min(new Set(this.others.map((p) => p.identity)).size + 1, MAX_COUNTED_NODES);
    const heard = listeners.filter((identity) => identity !== me);
    for (const identity of heard) this.joiners.delete(identity);
    this.otherListeners = new Set(heard).size;
  }

  get alone(): boolean {
    if (this.otherListeners !== 0) return false;
    const now = performance.now();
    for (const [identity, at] of this.joiners)
      if (now - at > this.joinGraceMs) this.joiners.delete(identity);
    return this.joiners.size === 0;
  }

  joined(identity: string): void {
    if (identity !== this.identity.name()) this.joiners.set(identity, performance.now());
  }

  /**
   * This node's place for `key` among the nodes hosting `actorId` (a node that does not say which
   * actors it hosts counts as hosting all): 0 when it should dispatch first, n - 1 when last, and
   * MAX_RANK at most.
   */
  rankOf(key: string, actorId: string): number {
    const me = this.identity.name();
    const mine = score(key, me);
    let ahead = 0;
    for (const other of this.others) {
      if (other.actors && !other.actors.includes(actorId)) continue;
      const theirs = score(key, other.identity);
      if (theirs > mine || (theirs === mine && other.identity < me)) ahead++;
    }
    return Math.min(ahead, MAX_RANK);
  }

  /**
   * How many ranks the nodes hosting `actorId` fill, this one counted, as `rankOf` does (ranks run
   * from 0 to this - 1).
   */
  hostsOf(actorId: string): number {
    let hosts = 1;
    for (const other of this.others) if (!other.actors || other.actors.includes(actorId)) hosts++;
    return Math.min(hosts, MAX_RANK + 1);
  }
}

export interface Peer {
  identity: string;
  /** The actors it hosts; null when it does not say. */
  actors: readonly string[] | null;
}

function score(key: string, node: string): bigint {
  return createHash('sha256').update(key).update('\u0000').update(node).digest().readBigUInt64BE(0);
}
