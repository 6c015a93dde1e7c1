import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import type { TraceContext } from '../primitives/trace-context.js';

/** A signal sent to an episode (`Episodes.signal`), delivered to one `ep.waitForSignal`, once. */
@Entity({ name: 'cyclium_signals' })
export class CycliumSignal {
  /** bigint: pg returns it as a string. */
  @PrimaryGeneratedColumn('identity', { type: 'bigint', generatedIdentity: 'ALWAYS' })
  id: string;

  @Column({ name: 'episode_id', type: 'uuid' })
  episodeId: string;

  @Column({ type: 'text' })
  name: string;

  @Column({ type: 'jsonb', nullable: true })
  payload: unknown;

  /** The node that stored it. */
  @Column({ name: 'sent_by', type: 'text', nullable: true })
  sentBy: string | null;

  @Column({ name: 'sent_at', type: 'timestamptz' })
  sentAt: Date;

  /** Null until a wait took it. */
  @Column({ name: 'delivered_at', type: 'timestamptz', nullable: true })
  deliveredAt: Date | null;

  /** The journal position (step number) of the wait it was delivered to. */
  @Column({ name: 'delivered_step', type: 'integer', nullable: true })
  deliveredStep: number | null;

  /** The W3C trace context it was sent in; null outside any trace. */
  @Column({ name: 'trace_context', type: 'jsonb', nullable: true })
  traceContext: TraceContext | null;
}
