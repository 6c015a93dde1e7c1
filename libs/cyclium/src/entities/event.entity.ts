import { Column, Entity, PrimaryColumn } from 'typeorm';
import type { TraceContext } from '../primitives/trace-context.js';

/** One bus event, as every node of its stack and env reads it (see PostgresBus). */
@Entity({ name: 'cyclium_events' })
export class CycliumEvent {
  @PrimaryColumn({ type: 'bigint' })
  id: string;

  /**
   * The writing transaction's id. The column is xid8, which TypeORM has no type for; pg returns it
   * as text.
   */
  @Column({ name: 'tx_id', type: 'text' })
  txId: string;

  @Column({ type: 'text' })
  channel: string;

  @Column({ name: 'event_id', type: 'text' })
  eventId: string;

  @Column({ type: 'text' })
  type: string;

  @Column({ type: 'jsonb', nullable: true })
  payload: unknown;

  @Column({ name: 'published_at', type: 'timestamptz' })
  publishedAt: Date;

  @Column({ type: 'text', nullable: true })
  publisher: string | null;

  @Column({ name: 'source_stack', type: 'text', nullable: true })
  sourceStack: string | null;

  @Column({ name: 'source_env', type: 'text', nullable: true })
  sourceEnv: string | null;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  /**
   * `<keyId>:<HMAC>` over the row's meaningful fields with the `integrity` option; null without it.
   */
  @Column({ type: 'text', nullable: true })
  signature: string | null;

  /**
   * The W3C trace context the event was published in
   * (`{ traceparent, tracestate? }`); null outside any trace.
   */
  @Column({ name: 'trace_context', type: 'jsonb', nullable: true })
  traceContext: TraceContext | null;
}
