import type { MigrationInterface, QueryRunner } from 'typeorm';
import { CycliumBusPayloads1764400000001 } from './1764400000001-cyclium-bus-payloads.js';

/**
 * The durable bus: every event is a row, and NOTIFY only says "look". `tx_id` is the writing
 * transaction's id, so a reader can tell exactly which rows became visible between two of its
 * snapshots (see EventLog): ids from the identity can commit out of order, transaction ids cannot
 * be skipped that way. Events that used to travel by reference through cyclium_bus_payloads are
 * plain rows now, so that table goes.
 */
export class CycliumEvents1764400000002 implements MigrationInterface {
  name = 'CycliumEvents1764400000002';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(`
      CREATE TABLE cyclium_events (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tx_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
        channel text NOT NULL,
        event_id text NOT NULL,
        type text NOT NULL,
        payload jsonb,
        published_at timestamptz NOT NULL,
        publisher text,
        source_stack text,
        source_env text,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    // A publisher that retries with the same event id stores the event once (per stack and env).
    await runner.query(
      `CREATE UNIQUE INDEX cyclium_events_channel_event_id ON cyclium_events (channel, event_id)`,
    );
    // The reader's only access path: "rows of my channel from these transactions on", in order.
    await runner.query(
      `CREATE INDEX cyclium_events_channel_tx ON cyclium_events (channel, tx_id, id)`,
    );
    await runner.query(`DROP TABLE cyclium_bus_payloads`);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP TABLE cyclium_events`);
    await new CycliumBusPayloads1764400000001().up(runner);
  }
}
