/**
 * The chaos soak's client: publishes events over HTTP at a steady rate to whichever node answers,
 * retrying each event (same id) on the next node until one answers 202, as a client behind a load
 * balancer would. What was answered 202 is accepted work: the checker holds the cluster to it.
 */
import type { ChaosNodes } from './chaos-nodes.js';

export interface AcceptedEvent {
  eventId: string;
  type: 'resource.updated' | 'resource.rebalance';
  at: number;
}

export class ChaosLoad {
  readonly accepted: AcceptedEvent[] = [];
  readonly statuses = new Map<number, number>();
  private running = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly nodes: ChaosNodes) {}

  start(): void {
    this.running = true;
    this.loop = this.publish();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }

  private async publish(): Promise<void> {
    for (let i = 0; this.running; i++) {
      // About ten events a second, one in ten a five-step rebalance that is still running when a fault lands.
      const rebalance = i % 10 === 0;
      const eventId = `chaos-${i}`;
      const type = rebalance ? 'resource.rebalance' : 'resource.updated';
      const payload = rebalance
        ? { resource: eventId, stepMs: 300 }
        : { resource: `r${i % 50}`, usage: i % 100 };
      await this.send(eventId, type, payload, i);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  private async send(
    eventId: string,
    type: AcceptedEvent['type'],
    payload: unknown,
    i: number,
  ): Promise<void> {
    for (let attempt = 0; this.running; attempt++) {
      const ports = this.nodes.ports();
      const port = ports[(i + attempt) % Math.max(ports.length, 1)];
      const status =
        port === undefined
          ? 0
          : await fetch(`http://127.0.0.1:${port}/events`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ type, eventId, payload }),
              signal: AbortSignal.timeout(10_000),
            }).then(
              (r) => r.status,
              () => 0,
            );
      this.statuses.set(status, (this.statuses.get(status) ?? 0) + 1);
      if (status === 202) {
        this.accepted.push({ eventId, type, at: Date.now() });
        return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
