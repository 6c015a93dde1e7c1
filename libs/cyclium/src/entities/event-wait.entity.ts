import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { MatchValue } from './waiting-for.js';

/**
 * A waiting episode's `ep.waitForEvent`: the first event of its channel and type committed after
 * it whose payload has `match`'s fields equal is recorded here, and wakes the episode.
 */
@Entity({ name: 'cyclium_event_waits' })
export class CycliumEventWait {
  @PrimaryColumn({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  /** The wait's journal position. */
  @PrimaryColumn({ name: 'step_no', type: 'integer' })
  stepNo: number;

  @Column({ type: 'text' })
  channel: string;

  @Column({ name: 'event_type', type: 'text' })
  eventType: string;

  /** The names of `match`'s fields, sorted: its shape. */
  @Column({ type: 'text', array: true })
  fields: string[];

  @Column({ type: 'jsonb' })
  match: Record<string, MatchValue>;

  /** The matching event's row (`cyclium_events.id`); null until one matched. */
  @Column({ name: 'event_row', type: 'bigint', nullable: true })
  eventRow: string | null;

  /** The matching event as the wait returns it. */
  @Column({ type: 'jsonb', nullable: true })
  event: unknown;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}

/** A set of fields some event wait of a channel and type matches on (one lookup per event each). */
@Entity({ name: 'cyclium_event_wait_shapes' })
export class CycliumEventWaitShape {
  @PrimaryColumn({ type: 'text' })
  channel: string;

  @PrimaryColumn({ name: 'event_type', type: 'text' })
  eventType: string;

  @PrimaryColumn({ type: 'text', array: true })
  fields: string[];
}
