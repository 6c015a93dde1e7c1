import { Column, Entity, PrimaryColumn } from 'typeorm';

/**
 * How far one consumer (an event-triggered expectation) has dispatched its channel (see
 * BusPositions).
 */
@Entity({ name: 'cyclium_bus_positions' })
export class CycliumBusPosition {
  @PrimaryColumn({ type: 'text' })
  channel: string;

  /** `<actor id>.<expectation id>`. */
  @PrimaryColumn({ type: 'text' })
  consumer: string;

  /**
   * The event type the consumer takes; null on a row a previous release wrote (it holds every
   * type).
   */
  @Column({ type: 'text', nullable: true })
  type: string | null;

  /** A pg_snapshot, which TypeORM has no type for; pg returns it as text (`xmin:xmax:xip,...`). */
  @Column({ type: 'text' })
  position: string;

  /**
   * Events this consumer could not dispatch for a reason of their own, and the last such reason.
   */
  @Column({ type: 'bigint' })
  skipped: string;

  @Column({ name: 'last_skip', type: 'text', nullable: true })
  lastSkip: string | null;

  @Column({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
