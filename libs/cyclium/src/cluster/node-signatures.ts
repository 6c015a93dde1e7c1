import type { Logger } from '@nestjs/common';
import type { RowSigner } from '../integrity/row-signer.service.js';
import type { Peer } from './peers.service.js';

/** A peer as the beat reads it: what Peers ranks, and what its row's signature covers. */
export interface SignedPeer extends Peer {
  stack: string | null;
  env: string | null;
  mode: string;
  signature: string | null;
}

/**
 * Node rows under the `integrity` option: this node signs its identity, stack, env, mode and actors
 * (not `last_seen_at`, the database clock's), and a peer whose row does not verify is left out of
 * the ranking and the NOTIFY spacing, named once in the log. Without the option every row counts.
 */
export class NodeSignatures {
  private readonly reported = new Set<string>();

  constructor(
    private readonly signer: RowSigner,
    private readonly logger: Logger,
  ) {}

  sign(
    identity: string,
    stack: string | null,
    env: string | null,
    mode: string,
    actors: readonly string[],
  ): string | null {
    return this.signer.sign('node', [identity, stack, env, mode, actors]);
  }

  /**
   * Whether the peer's row is signed by this deployment (a node with the option); true without it.
   */
  signs(peer: SignedPeer): boolean {
    return this.signer.verify(
      'node',
      [peer.identity, peer.stack, peer.env, peer.mode, peer.actors],
      peer.signature,
    );
  }

  trusted(peers: SignedPeer[]): SignedPeer[] {
    if (!this.signer.enabled) return peers;
    return peers.filter((peer) => {
      if (this.signs(peer)) return true;
      if (!this.reported.has(peer.identity)) {
        this.reported.add(peer.identity);
        this.logger.warn(
          `ignored node row "${peer.identity}": not signed by this deployment's integrity key ` +
            `(forged, edited, or a node without it)`,
        );
      }
      return false;
    });
  }
}
