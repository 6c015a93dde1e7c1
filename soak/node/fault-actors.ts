/**
 * The actors of the fault-schedule soak. Every expectation runs the same work, read from its
 * payload (see WorkPayload): steps of `stepMs`, one of which may throw a set number of times in
 * all, an optional durable sleep, and outputs. Each step leaves a row in `fs_effects` just before
 * it returns, so the checker can tell whether a step ran again after its checkpoint committed.
 */
import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import {
  Actor,
  Env,
  Expectation,
  NodeIdentity,
  OutputAdapter,
  StackSlug,
  type Convergence,
  type DeliveryContext,
  type EpisodeContext,
  type OutputDeliverer,
  type StepTools,
} from '@cyclium/nestjs';
import type { CycliumOutput } from '@cyclium/nestjs/entities';
import {
  EVENT_RETRY,
  MAX_ATTEMPTS,
  SUBJECT_COOLDOWN_MS,
  SUBJECT_DEBOUNCE_MS,
} from './actor-policies.js';
import type { WorkPayload } from './node-protocol.js';

/** Runs the payload's work for one episode; shared by every expectation. */
@Injectable()
export class FaultWork {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly identity: NodeIdentity,
  ) {}

  async run(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    const work = ep.trigger.payload;
    for (let n = 1; n <= work.steps; n++) {
      if (work.sleepBefore === n && work.sleepMs !== undefined) await ep.sleep('nap', work.sleepMs);
      await ep.step(`s${n}`, (tools) => this.step(ep.episode.id, n, work, tools));
    }
    const outputs = Array.from({ length: work.outputs ?? 0 }, (_, i) => ({
      type: 'fs.report',
      key: `${ep.episode.id}:${i}`,
      payload: { op: work.op, episodeId: ep.episode.id, i },
    }));
    return { summary: `${work.op} on ${this.identity.name()}`, outputs };
  }

  private async step(
    episodeId: string,
    n: number,
    work: WorkPayload,
    tools: StepTools,
  ): Promise<string> {
    await sleep(work.stepMs, undefined, { signal: tools.signal });
    if (
      work.throwAt === n &&
      (await this.thrown(episodeId, n, tools.signal)) < (work.throws ?? 0)
    ) {
      await this.effect(episodeId, n, 'throw', tools.signal);
      throw new Error(`s${n} of ${work.op} throws on purpose`);
    }
    await this.effect(episodeId, n, 'done', tools.signal);
    return `s${n}`;
  }

  private async effect(
    episodeId: string,
    n: number,
    kind: 'done' | 'throw',
    signal: AbortSignal,
  ): Promise<void> {
    const sql = `INSERT INTO fs_effects (episode_id, step_no, kind, node) VALUES ($1, $2, $3, $4)`;
    await this.persist(signal, () =>
      this.dataSource.query(sql, [episodeId, n, kind, this.identity.name()]),
    );
  }

  private async thrown(episodeId: string, n: number, signal: AbortSignal): Promise<number> {
    const sql = `SELECT count(*)::int AS n FROM fs_effects WHERE episode_id = $1 AND step_no = $2 AND kind = 'throw'`;
    const rows = await this.persist(signal, () =>
      this.dataSource.query<Array<{ n: number }>>(sql, [episodeId, n]),
    );
    return rows[0]?.n ?? 0;
  }

  /**
   * The step's own side effect is retried through a database outage, as a host's idempotent call
   * to an external system would be: a step fails only when the schedule makes it throw (or its
   * run is aborted), never because the soak restarted the database under it.
   */
  private async persist<T>(signal: AbortSignal, write: () => Promise<T>): Promise<T> {
    for (;;) {
      signal.throwIfAborted();
      try {
        return await write();
      } catch {
        await sleep(200, undefined, { signal });
      }
    }
  }
}

@Injectable()
@Actor({ id: 'fs_alpha', maxConcurrentEpisodes: 4 })
export class AlphaActor {
  constructor(private readonly work: FaultWork) {}

  @Expectation({
    id: 'job_restart',
    trigger: 'manual',
    recoveryPolicy: 'restart',
    maxAttempts: MAX_ATTEMPTS,
  })
  jobRestart(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }

  @Expectation({ id: 'job_fail', trigger: 'manual', recoveryPolicy: 'fail' })
  jobFail(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }

  @Expectation({
    id: 'on_work',
    trigger: { event: 'fs.work' },
    recoveryPolicy: 'restart',
    maxAttempts: MAX_ATTEMPTS,
    retry: EVENT_RETRY,
  })
  onWork(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }

  @Expectation({
    id: 'on_subject',
    trigger: { event: 'fs.subject' },
    recoveryPolicy: 'restart',
    maxAttempts: MAX_ATTEMPTS,
    subjectKey: 'subject',
    debounceMs: SUBJECT_DEBOUNCE_MS,
    cooldownMs: SUBJECT_COOLDOWN_MS,
  })
  onSubject(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }
}

/** `fs_alpha` as a previous deploy declared it: the manual expectations, none of the event-triggered ones. */
@Injectable()
@Actor({ id: 'fs_alpha', maxConcurrentEpisodes: 4 })
export class LegacyAlphaActor {
  constructor(private readonly work: FaultWork) {}

  @Expectation({
    id: 'job_restart',
    trigger: 'manual',
    recoveryPolicy: 'restart',
    maxAttempts: MAX_ATTEMPTS,
  })
  jobRestart(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }

  @Expectation({ id: 'job_fail', trigger: 'manual', recoveryPolicy: 'fail' })
  jobFail(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }
}

@Injectable()
@Actor({ id: 'fs_beta', maxConcurrentEpisodes: 3 })
export class BetaActor {
  constructor(private readonly work: FaultWork) {}

  @Expectation({
    id: 'job_beta',
    trigger: 'manual',
    recoveryPolicy: 'restart',
    maxAttempts: MAX_ATTEMPTS,
  })
  jobBeta(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }

  @Expectation({ id: 'on_work_b', trigger: { event: 'fs.work' }, recoveryPolicy: 'fail' })
  onWorkB(ep: EpisodeContext<WorkPayload>): Promise<Convergence> {
    return this.work.run(ep);
  }
}

/** Records each delivery with the node, env and stack that made it. */
@Injectable()
@OutputAdapter('fs.report')
export class ReportAdapter implements OutputDeliverer<{ op: string; episodeId: string }> {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly identity: NodeIdentity,
    private readonly env: Env,
    private readonly stack: StackSlug,
  ) {}

  async deliver(
    output: CycliumOutput & { payload: { op: string; episodeId: string } },
    context: DeliveryContext,
  ): Promise<unknown> {
    const sql = `INSERT INTO fs_deliveries (output_id, episode_id, node, env, stack, attempt)
                 VALUES ($1, $2, $3, $4, $5, $6)`;
    const values = [
      output.id,
      output.payload.episodeId,
      this.identity.name(),
      this.env.current(),
      this.stack.current(),
      context.attempt,
    ];
    await this.dataSource.query(sql, values);
    return { node: this.identity.name() };
  }
}
