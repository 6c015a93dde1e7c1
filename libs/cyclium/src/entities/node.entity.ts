import { Column, Entity, PrimaryColumn } from 'typeorm';

/** A row of `cyclium_nodes`: one node's identity, stack, env and when it was last seen. */
@Entity({ name: 'cyclium_nodes' })
export class CycliumNode {
  @PrimaryColumn({ name: 'node_identity', type: 'text' })
  nodeIdentity: string;

  @Column({ type: 'text', nullable: true })
  stack: string | null;

  @Column({ type: 'text', nullable: true })
  env: string | null;

  @Column({ type: 'text' })
  mode: string;

  @Column({ type: 'text' })
  hostname: string;

  @Column({ type: 'integer' })
  pid: number;

  @Column({ type: 'text' })
  version: string;

  @Column({ name: 'started_at', type: 'timestamptz' })
  startedAt: Date;

  @Column({ name: 'last_seen_at', type: 'timestamptz' })
  lastSeenAt: Date;

  /**
   * The actors this node hosts; null for a node from before the column (counted as hosting all).
   */
  @Column({ type: 'text', array: true, nullable: true })
  actors: string[] | null;

  /**
   * The expectations it hosts, by actor (`{ actor: [expectation, …] }`); null for a node from
   * before the column (counted as hosting every expectation of its actors).
   */
  @Column({ type: 'jsonb', nullable: true })
  expectations: Record<string, string[]> | null;

  /**
   * The process now running this node (random per process); null while it is going, or for rows
   * from before the column.
   */
  @Column({ name: 'boot_id', type: 'uuid', nullable: true })
  bootId: string | null;

  /**
   * The terminal lifecycle event types its handlers read (`*`: every type), as declared by the boot
   * in `lifecycleBoot`; read as every type when that is not the row's boot id.
   */
  @Column({ name: 'lifecycle_reads', type: 'text', array: true, nullable: true })
  lifecycleReads: string[] | null;

  @Column({ name: 'lifecycle_boot', type: 'uuid', nullable: true })
  lifecycleBoot: string | null;

  /**
   * `<keyId>:<HMAC>` over the row's meaningful fields with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;
}
