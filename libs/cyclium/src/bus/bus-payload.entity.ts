import { Column, Entity, PrimaryColumn } from 'typeorm';

/** An event too large for NOTIFY, stored for receivers to load by id; swept after an hour. */
@Entity({ name: 'cyclium_bus_payloads' })
export class CycliumBusPayload {
  @PrimaryColumn({ type: 'uuid' })
  id: string;

  @Column({ type: 'jsonb' })
  event: unknown;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
