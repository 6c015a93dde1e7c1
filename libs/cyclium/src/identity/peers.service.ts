import { Injectable } from '@nestjs/common';
import { createHash } from 'node:crypto';
import { NodeIdentity } from './node-identity.service.js';

/**
 * The live nodes that hear this node's bus channel and can take a trigger (same stack and env,
 * not disabled), as of this node's last beat, and a ranking of them per trigger that every node
 * with the same list computes alike (rendezvous hashing): rank 0 dispatches at once, the others
 * stand by in rank order. A list that differs between nodes for a while (a node joined or died
 * since someone's last beat) costs an extra attempt or a backup's delay, never an episode: the
 * dedupe index still decides who runs it.
 */
@Injectable()
export class Peers {
  private others: readonly Peer[] = [];
  /** Read on every NOTIFY run (its spacing follows the cluster's size): computed once per update. */
  private count = 1;

  constructor(private readonly identity: NodeIdentity) {}

  /** This node and the others, sorted. */
  list(): string[] {
    return [...new Set([...this.others.map((p) => p.identity), this.identity.name()])].sort();
  }

  get size(): number {
    return this.count;
  }

  /** Replaces the list (NodeRegistry, at registration and every beat). */
  update(peers: readonly Peer[]): void {
    this.others = peers.filter((peer) => peer.identity !== this.identity.name());
    this.count = new Set(this.others.map((p) => p.identity)).size + 1;
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
}

export interface Peer {
  identity: string;
  /** The actors it hosts; null when it does not say. */
  actors: readonly string[] | null;
}

function score(key: string, node: string): bigint {
  return createHash('sha256').update(key).update('\u0000').update(node).digest().readBigUInt64BE(0);
}
