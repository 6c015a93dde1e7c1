import { randomUUID } from 'node:crypto';
import { Bus, type BusEvent, type BusHandler, type PublishOptions } from '@cyclium/nestjs';
import { LocalBus } from '@cyclium/nestjs/adapters';
import pg from 'pg';

/**
 * The reference the durable bus is measured against: events travel in NOTIFY payloads only
 * (nothing stored, nothing replayed), group-committed the same way (the first at once, the rest
 * while one is in flight), each batch one `pg_notify` per 7,900-byte chunk. It is what Cyclium
 * shipped before the events table, minus its large-payload side table; a benchmark, not a transport.
 */
export class NotifyOnlyBus extends Bus {
  private readonly local = new LocalBus();
  private client: pg.Client | undefined;
  private queue: Array<{ json: string; done: () => void; fail: (e: unknown) => void }> = [];
  private inFlight = false;
  private scheduled = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly url: string,
    private readonly channel = 'cyclium_bench_notify',
  ) {
    super();
  }

  async start(): Promise<void> {
    this.client = new pg.Client({ connectionString: this.url });
    this.client.on('error', () => undefined);
    this.client.on('notification', (message) => {
      for (const event of JSON.parse(message.payload ?? '[]') as BusEvent[])
        this.local.deliver(event);
    });
    await this.client.connect();
    await this.client.query(`LISTEN ${this.channel}`);
  }

  async stop(): Promise<void> {
    await this.client?.end();
  }

  publish<P>(type: string, payload: P, options: PublishOptions = {}): Promise<BusEvent<P>> {
    const event: BusEvent<P> = {
      type,
      eventId: options.eventId ?? randomUUID(),
      payload,
      publishedAt: new Date().toISOString(),
    };
    return new Promise((resolve, reject) => {
      this.queue.push({ json: JSON.stringify(event), done: () => resolve(event), fail: reject });
      this.schedule();
    });
  }

  subscribe<P>(type: string, handler: BusHandler<P>): () => void {
    return this.local.subscribe(type, handler);
  }

  private schedule(): void {
    if (this.inFlight || this.scheduled || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    const batch = this.queue.splice(0);
    this.inFlight = true;
    const chunks: string[] = [];
    let current: string[] = [];
    let bytes = 2;
    for (const item of batch) {
      if (current.length > 0 && bytes + item.json.length + 1 > 7_900) {
        chunks.push(`[${current.join(',')}]`);
        current = [];
        bytes = 2;
      }
      current.push(item.json);
      bytes += item.json.length + 1;
    }
    if (current.length > 0) chunks.push(`[${current.join(',')}]`);
    try {
      await this.pool.query(
        `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, c) FROM unnest($2::text[]) WITH ORDINALITY AS t (c, n) ORDER BY n`,
        [this.channel, chunks],
      );
      for (const item of batch) item.done();
    } catch (error) {
      for (const item of batch) item.fail(error);
    } finally {
      this.inFlight = false;
      this.schedule();
    }
  }
}
