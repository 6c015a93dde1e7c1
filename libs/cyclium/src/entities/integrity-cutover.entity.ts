import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * When the nodes of one stack and env with the `integrity` option began refusing unsigned rows
 * (docs/guides/integrity.md): written once, by the node that found no live node without the option
 * and signed the unsigned rows still in flight.
 */
@Entity({ name: 'cyclium_integrity_cutovers' })
export class CycliumIntegrityCutover {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ name: 'recorded_at', type: 'timestamptz' })
  recordedAt: Date;

  @Column({ name: 'recorded_by', type: 'text' })
  recordedBy: string;

  /** How many unsigned rows in flight the recording node signed. */
  @Column({ name: 'signed_rows', type: 'integer' })
  signedRows: number;
}
