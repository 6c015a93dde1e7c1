/**
 * Compile-time check, run by `tsc -p test/tsconfig.test.json` in `npm test`: a custom durable bus
 * can be written against the package's own exports (the seam from `@cyclium/nestjs/adapters`),
 * naming every type it takes.
 */
import type { BusEvent, SqlExecutor } from '@cyclium/nestjs';
import type {
  DurableEvents,
  DurableHandler,
  DurableSubscriptions,
  EventReceipt,
  Statement,
} from '@cyclium/nestjs/adapters';

export class OutboxTable implements DurableEvents {
  async appendWithin(client: SqlExecutor, events: readonly BusEvent[]): Promise<void> {
    await client.query(
      'INSERT INTO app_outbox (type, payload) SELECT * FROM unnest($1::text[], $2::jsonb[])',
      [events.map((e) => e.type), events.map((e) => JSON.stringify(e.payload))],
    );
  }

  appendFragment(statement: Statement, events: readonly BusEvent[], when: string): string {
    const types = statement.param(
      events.map((e) => e.type),
      'text[]',
    );
    return `INSERT INTO app_outbox (type) SELECT t FROM unnest(${types}) t WHERE ${when} RETURNING 1`;
  }

  wake(): void {}
}

/** A bus that replays to named consumers: each handler settles once its event is dispatched. */
export class ReplayingBus implements DurableSubscriptions {
  private readonly handlers = new Map<string, DurableHandler>();

  subscribeDurable<P>(consumer: string, type: string, handler: DurableHandler<P>): () => void {
    this.handlers.set(`${consumer}:${type}`, handler as DurableHandler);
    return () => this.handlers.delete(`${consumer}:${type}`);
  }

  async replay(key: string, event: BusEvent, receipt: EventReceipt): Promise<void> {
    await this.handlers.get(key)?.(event, receipt);
  }
}
