/**
 * Who else hears this node's bus channel, as far as this node knows (Peers implements it from the
 * node table). A NOTIFY costs every listening connection a transaction, so a node that knows it is
 * the only listener wakes itself in-process instead. Knowing is conservative: before the first
 * look at the node table, and for a while after another node announced that it started
 * listening, a node is not alone.
 */
export interface BusAudience {
  /** True only when no other node is known to listen on the channel. */
  readonly alone: boolean;
  /**
   * Another node announced that it listens now (its row may not have reached this node's last
   * look).
   */
  joined(identity: string): void;
}

/**
 * A bus that can tell the other nodes of its channel that this node listens (PostgresBus). Said
 * once this node's row is written: whoever starts listening later reads the row at its own
 * registration, and whoever listens already hears this, so no node stays alone by mistake.
 */
export interface ListeningAnnouncement {
  announceListening(): void;
}

export function announcesListening(bus: object): bus is ListeningAnnouncement {
  return typeof (bus as Partial<ListeningAnnouncement>).announceListening === 'function';
}
