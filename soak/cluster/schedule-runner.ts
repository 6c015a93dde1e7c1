/**
 * Runs one schedule against a cluster on its own database: the work lane sends each operation at
 * its time without waiting for the answer, the fault lane runs each fault at its time (a kill or a
 * drain brings its node back later, on a timer of its own). Then the cluster is brought back
 * whole (every slot up, every node full) and left until it is quiet, within a deadline.
 */
import type { Writable } from 'node:stream';
import pg from 'pg';
import type { FaultOp, Schedule, WorkEntry } from '../schedule/schedule.js';
import type { NodeAnswer } from '../node/node-protocol.js';
import { FaultCluster } from './fault-cluster.js';
import { waitForQuiet } from './quiescence.js';
import type { PostgresServer } from './postgres-server.js';
import type { RunLog, WorkRecord } from './run-log.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));

export class ConfigRefusedError extends Error {
  override readonly name = 'ConfigRefusedError';
}

export interface RunOptions {
  bootTimeoutMs: number;
  quiesceTimeoutMs: number;
}

export class ScheduleRunner {
  readonly log: RunLog;
  private readonly cluster: FaultCluster;
  private readonly pending = new Set<Promise<unknown>>();
  private readonly answered = new Map<number, WorkRecord>();
  private start = 0;

  constructor(
    private readonly schedule: Schedule,
    private readonly server: PostgresServer,
    private readonly databaseUrl: string,
    output: Writable,
  ) {
    const now = Date.now();
    this.log = {
      setup: schedule.setup,
      startedAt: now,
      scheduleEndedAt: now,
      quiesced: false,
      quiescedAt: now,
      work: [],
      faults: [],
      nodes: [],
      availability: [],
      harnessErrors: [],
    };
    this.cluster = new FaultCluster(schedule.setup, databaseUrl, this.log, output);
  }

  async run(options: RunOptions): Promise<RunLog> {
    try {
      await this.cluster.bootAll(options.bootTimeoutMs);
      const refused = this.log.nodes.find(
        (n) => n.event === 'exit' && /CycliumConfigError/.test(n.exit?.reason ?? ''),
      );
      if (refused) throw new ConfigRefusedError(refused.exit?.reason ?? 'refused');
      this.start = Date.now();
      this.log.startedAt = this.start;
      await Promise.all([this.workLane(), this.faultLane()]);
      await this.settlePending();
      if (!this.server.up) await this.server.start();
      this.cluster.bootMissing();
      if (!(await this.cluster.whenAllUp(options.bootTimeoutMs)))
        this.log.harnessErrors.push('not every node came back up at the end');
      await this.cluster.allFull();
      await this.settlePending();
      this.log.scheduleEndedAt = Date.now();
      this.log.quiesced = await waitForQuiet(this.databaseUrl, options.quiesceTimeoutMs);
      this.log.quiescedAt = Date.now();
      return this.log;
    } finally {
      await this.cluster.stopAll(false);
      if (!this.server.up) await this.server.start().catch(() => undefined);
    }
  }

  private track<T>(promise: Promise<T>): void {
    const tracked = promise.catch((error: unknown) => this.log.harnessErrors.push(String(error)));
    this.pending.add(tracked);
    void tracked.finally(() => this.pending.delete(tracked));
  }

  private async settlePending(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  private async workLane(): Promise<void> {
    for (const entry of this.schedule.work) {
      await sleep(this.start + entry.at - Date.now());
      this.track(this.send(entry));
    }
  }

  private async send(entry: WorkEntry): Promise<void> {
    const { op } = entry;
    const node = this.cluster.nodeFor(op.slot, op.kind === 'trigger' ? op.actor : undefined);
    const sentAt = Date.now();
    const record = (answer: NodeAnswer): void => {
      const done: WorkRecord = {
        n: entry.n,
        op,
        slot: node?.slot ?? null,
        nodeId: node?.nodeId ?? null,
        sentAt,
        answeredAt: Date.now(),
        answer,
      };
      this.log.work.push(done);
      this.answered.set(entry.n, done);
    };
    if (!node) return record({ ok: false, error: 'no node up', unavailable: false });
    if (op.kind === 'trigger') {
      const runAt =
        op.runAtInMs === undefined ? undefined : new Date(Date.now() + op.runAtInMs).toISOString();
      const { kind: _, slot: __, runAtInMs: ___, ...rest } = op;
      return record(
        await node.handle.command({ cmd: 'trigger', ...rest, ...(runAt ? { runAt } : {}) }),
      );
    }
    if (op.kind === 'publish') {
      return record(
        await node.handle.command({
          cmd: 'publish',
          type: op.type,
          eventId: op.eventId,
          payload: op.payload,
        }),
      );
    }
    const target = this.answered.get(op.target)?.answer;
    const episodeId = target?.ok ? target.episodeId : undefined;
    if (!episodeId) return record({ ok: false, error: 'nothing to cancel', unavailable: false });
    record(await node.handle.command({ cmd: 'cancel', episodeId }));
  }

  private async faultLane(): Promise<void> {
    for (const entry of this.schedule.faults) {
      await sleep(this.start + entry.at - Date.now());
      const at = Date.now();
      try {
        const { nodeIds, detail } = await this.fault(entry.op);
        this.log.faults.push({ kind: entry.op.kind, at, endAt: Date.now(), nodeIds, detail });
      } catch (error) {
        this.log.harnessErrors.push(`${entry.op.kind} at ${entry.at}: ${String(error)}`);
      }
    }
  }

  private later(ms: number, fn: () => Promise<unknown> | void): void {
    this.track(sleep(ms).then(fn));
  }

  private async fault(op: FaultOp): Promise<{ nodeIds: string[]; detail: string }> {
    switch (op.kind) {
      case 'kill':
      case 'term': {
        const ended = op.kind === 'kill' ? this.cluster.kill(op.slot) : this.cluster.drain(op.slot);
        // A drain takes its time; the lane goes on meanwhile, and the slot comes back after it.
        this.track(
          ended.then(() =>
            this.later(op.backAfterMs, () => this.cluster.boot(op.slot, op.identity)),
          ),
        );
        const nodeId = this.cluster.nodeIdOf(op.slot);
        return {
          nodeIds: [nodeId],
          detail: `slot ${op.slot}, back after ${op.backAfterMs} ms as ${op.identity}`,
        };
      }
      case 'db_restart':
        await this.server.stop();
        await sleep(op.downMs);
        await this.server.start();
        return { nodeIds: [], detail: `down ${op.downMs} ms` };
      case 'cluster_stop': {
        const slots = this.cluster.mainSlots();
        const ids = slots.map((slot) => this.cluster.nodeIdOf(slot));
        const how = (i: number) => (op.how === 'mixed' ? (i % 2 === 0 ? 'kill' : 'term') : op.how);
        await Promise.all(
          slots.map((slot, i) =>
            how(i) === 'kill' ? this.cluster.kill(slot) : this.cluster.drain(slot),
          ),
        );
        await sleep(op.downMs);
        for (const slot of op.first) this.cluster.boot(slot, 'same');
        const rest = slots.filter((slot) => !op.first.includes(slot));
        this.later(op.restLaterMs, () => rest.forEach((slot) => this.cluster.boot(slot, 'same')));
        return {
          nodeIds: ids,
          detail: `${op.how}, down ${op.downMs} ms, first ${op.first.join(',')}, rest ${op.restLaterMs} ms later`,
        };
      }
      case 'db_error': {
        const code = /^[0-9A-Z]{5}$/.test(op.code) ? op.code : '40001';
        await this.sql(
          `CREATE TRIGGER fs_fault BEFORE INSERT ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION fs_fault('${code}')`,
        );
        await sleep(op.forMs);
        await this.clearDatabaseError();
        return {
          nodeIds: [],
          detail: `every episode insert fails with ${code} for ${op.forMs} ms`,
        };
      }
      case 'retention': {
        const node = this.cluster.nodeFor(op.slot);
        const answer = node ? await node.handle.command({ cmd: 'retention' }) : null;
        return {
          nodeIds: node ? [node.nodeId] : [],
          detail: answer ? JSON.stringify(answer) : 'no node up',
        };
      }
      case 'mode': {
        const slots = op.slot === 'all' ? this.cluster.mainSlots() : [op.slot];
        const set = await Promise.all(
          slots.map((slot) => this.cluster.setMode(slot, op.mode, op.actor)),
        );
        const restore = () =>
          Promise.all(slots.map((slot) => this.cluster.setMode(slot, 'full', op.actor, true)));
        this.later(op.forMs, restore);
        const ids = slots.filter((_, i) => set[i]).map((slot) => this.cluster.nodeIdOf(slot));
        return { nodeIds: ids, detail: `${op.actor ?? 'node'} ${op.mode} for ${op.forMs} ms` };
      }
    }
  }

  /** Removes the db_error fault, retrying through a database restart. */
  private async clearDatabaseError(): Promise<void> {
    for (let attempt = 0; attempt < 120; attempt++) {
      try {
        return await this.sql(`DROP TRIGGER IF EXISTS fs_fault ON cyclium_episodes`);
      } catch {
        await sleep(500);
      }
    }
    this.log.harnessErrors.push('could not remove the injected database error');
  }

  private async sql(statement: string): Promise<void> {
    const db = new pg.Client({
      connectionString: this.databaseUrl,
      connectionTimeoutMillis: 5_000,
    });
    db.on('error', () => undefined);
    try {
      await db.connect();
      await db.query(statement);
    } finally {
      await db.end().catch(() => undefined);
    }
  }
}
