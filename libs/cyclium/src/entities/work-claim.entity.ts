import { Column, Entity, PrimaryColumn } from 'typeorm';

/** Where a work claim is: held (`claimed`), or finished as `done` or `failed`. */
export type WorkClaimState = 'claimed' | 'done' | 'failed';

/** A row of `cyclium_work_claims`: one claim, its holder, fencing token and lease. */
@Entity({ name: 'cyclium_work_claims' })
export class CycliumWorkClaim {
  @PrimaryColumn({ name: 'dedupe_key', type: 'text' })
  dedupeKey: string;

  @Column({ type: 'text' })
  state: WorkClaimState;

  @Column({ name: 'owner_node', type: 'text' })
  ownerNode: string;

  @Column({ name: 'lease_until', type: 'timestamptz' })
  leaseUntil: Date;

  @Column({ name: 'claimed_at', type: 'timestamptz' })
  claimedAt: Date;

  @Column({ name: 'last_heartbeat_at', type: 'timestamptz', nullable: true })
  lastHeartbeatAt: Date | null;

  @Column({ name: 'finished_at', type: 'timestamptz', nullable: true })
  finishedAt: Date | null;

  @Column({ type: 'integer' })
  attempt: number;

  /** bigint in the table; TypeORM hands it back as a string to keep every digit. */
  @Column({ type: 'bigint' })
  fence: string;

  @Column({ name: 'work_type', type: 'text', nullable: true })
  workType: string | null;

  @Column({ name: 'error_detail', type: 'text', nullable: true })
  errorDetail: string | null;
}
