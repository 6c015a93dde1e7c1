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
 * It also knows who else listens on the channel at all (any mode), so a lone node skips its NOTIFYs
 * (BusAudience). A node that announced it started listening counts until a look at the node table
 * shows its row, or for three beat intervals if it never registers.
 */
@Injectable()
export class Peers implements BusAudience {
  private others: readonly Peer[] = [];
  /** Read on every NOTIFY run (its spacing follows the cluster's size): computed once per update. */
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
  update(peers: readonly Peer[], listeners: readonly string[] = peers.map((p) => p.identity)): void {
    const me = this.identity.name();
    this.others = peers.filter((peer) => peer.identity !== me);
    this.count = new Set(this.others.map((p) => p.identity)).size + 1;
    const heard = listeners.filter((identity) => identity !== me);
    for (const identity of heard) this.joiners.delete(identity);
    this.otherListeners = new Set(heard).size;
  }

  get alone(): boolean {
    if (this.otherListeners !== 0) return false;
    const now = performance.now();
    for (const [identity, at] of this.joiners) if (now - at > this.joinGraceMs) this.joiners.delete(identity);
    return this.joiners.size === 0;
  }

  joined(identity: string): void {
    if (identity !== this.identity.name()) this.joiners.set(identity, performance.now());
  }

  /**
   * This node's place for `key` among the nodes hosting `actorId` (a node that does not say which
   * actors it hosts counts as hosting all): 0 when it should dispatch first, n - 1 when last.
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
    return ahead;
  }

  /** How many nodes host `actorId`, this one counted as one, as `rankOf` does (ranks run from 0 to this - 1). */
  hostsOf(actorId: string): number {
    let hosts = 1;
    for (const other of this.others) if (!other.actors || other.actors.includes(actorId)) hosts++;
    return hosts;
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
