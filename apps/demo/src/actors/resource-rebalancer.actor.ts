import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import {
  Actor,
  Expectation,
  NodeIdentity,
  type Convergence,
  type EpisodeContext,
  type StepTools,
} from '@cyclium/nestjs';
import { unlessDropped } from './dropped-declarations.js';

export interface RebalanceRequest {
  resource: string;
  /** How long each step takes. Default 200. */
  stepMs?: number;
  /** 1-based step that sleeps through an abort, like real code that never looks at the signal. */
  ignoreAbortAtStep?: number;
  /** Propose a `rebalance.report` output under this key. */
  outputKey?: string;
  /** 1-based step that throws, so the episode ends `failed`: something to inspect and retry on the ops page. */
  failAtStep?: number;
  /** With `failAtStep`: throw only this many times in all (each logged as `<step>:failed`), then succeed. */
  failTimes?: number;
  /** A durable `ep.sleep` this long after the second step (`drain`): the episode waits and any node resumes it. */
  sleepMs?: number;
  /** Runs only the first this many of the five steps (a short episode, for the benchmarks). Default 5. */
  steps?: number;
  /** With `slowStepMs`: the 1-based step (the sleep counts as one) that takes this long instead of `stepMs`. */
  slowAtStep?: number;
  slowStepMs?: number;
}

const STEPS = ['plan', 'drain', 'move', 'verify', 'report'] as const;

/**
 * A slow, five-step episode whose every step leaves a row in `demo_rebalance_log`, so the cluster
 * tests can see which node ran which step, and how often, across crashes, drains and takeovers.
 * The expectations differ only in what recovery does with an orphan, and in retries; a node can
 * leave any of them out (DEMO_DROP_EXPECTATIONS, as a release without it would).
 */
@Injectable()
// DEMO_REBALANCER_SLOTS (default 10): a cluster test makes nodes full with one long episode.
@Actor({
  id: 'resource_rebalancer',
  maxConcurrentEpisodes: Number(process.env.DEMO_REBALANCER_SLOTS ?? 10),
})
export class ResourceRebalancerActor {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly identity: NodeIdentity,
  ) {}

  @unlessDropped(
    'resource_rebalancer',
    'rebalance',
    Expectation({
      id: 'rebalance',
      trigger: { event: 'resource.rebalance' },
      recoveryPolicy: 'restart',
      maxAttempts: 3,
    }),
  )
  rebalance(ep: EpisodeContext<RebalanceRequest>): Promise<Convergence> {
    return this.run(ep);
  }

  @unlessDropped(
    'resource_rebalancer',
    'rebalance_once',
    Expectation({
      id: 'rebalance_once',
      trigger: { event: 'resource.rebalance_once' },
      recoveryPolicy: 'fail',
    }),
  )
  rebalanceOnce(ep: EpisodeContext<RebalanceRequest>): Promise<Convergence> {
    return this.run(ep);
  }

  /** Up to three attempts, the first backoff DEMO_RETRY_INITIAL_MS (default 2 s) and doubling; each resumes from the journal. */
  @unlessDropped(
    'resource_rebalancer',
    'rebalance_retried',
    Expectation({
      id: 'rebalance_retried',
      trigger: { event: 'resource.rebalance_retried' },
      recoveryPolicy: 'restart',
      retry: {
        attempts: 3,
        backoff: { initialMs: Number(process.env.DEMO_RETRY_INITIAL_MS ?? 2_000), factor: 2 },
      },
    }),
  )
  rebalanceRetried(ep: EpisodeContext<RebalanceRequest>): Promise<Convergence> {
    return this.run(ep);
  }

  private async run(ep: EpisodeContext<RebalanceRequest>): Promise<Convergence> {
    const {
      resource,
      stepMs = 200,
      ignoreAbortAtStep,
      outputKey,
      failAtStep,
      failTimes,
      sleepMs,
    } = ep.trigger.payload;
    const { slowAtStep, slowStepMs } = ep.trigger.payload;
    for (const name of STEPS.slice(0, ep.trigger.payload.steps ?? STEPS.length)) {
      if (name === 'move' && sleepMs !== undefined) await ep.sleep('pause', sleepMs);
      await ep.step(name, async (tools) => {
        if (
          tools.stepNo === failAtStep &&
          (failTimes === undefined || (await this.failedBefore(ep.episode.id, name)) < failTimes)
        ) {
          if (failTimes !== undefined) await this.log(ep.episode.id, tools, `${name}:failed`);
          throw new Error(`${name} failed on purpose (failAtStep ${failAtStep})`);
        }
        const ms = tools.stepNo === slowAtStep && slowStepMs !== undefined ? slowStepMs : stepMs;
        return this.work(ep.episode.id, name, tools, ms, ignoreAbortAtStep);
      });
    }
    const node = this.identity.name();
    return {
      summary: `rebalanced ${resource} on ${node}`,
      outputs: outputKey
        ? [{ type: 'rebalance.report', key: outputKey, payload: { resource } }]
        : [],
    };
  }

  private async work(
    episodeId: string,
    name: string,
    { stepNo, idempotencyKey, signal }: StepTools,
    stepMs: number,
    ignoreAbortAtStep: number | undefined,
  ): Promise<{ step: string; node: string }> {
    // The stubborn step writes its row even after an abort: the tests count on seeing it.
    await sleep(stepMs, undefined, stepNo === ignoreAbortAtStep ? {} : { signal });
    await this.log(episodeId, { stepNo, idempotencyKey }, name);
    return { step: name, node: this.identity.name() };
  }

  private async log(
    episodeId: string,
    { stepNo, idempotencyKey }: Pick<StepTools, 'stepNo' | 'idempotencyKey'>,
    step: string,
  ): Promise<void> {
    await this.dataSource.query(
      `INSERT INTO demo_rebalance_log (episode_id, step_no, step, node, idempotency_key) VALUES ($1, $2, $3, $4, $5)`,
      [episodeId, stepNo, step, this.identity.name(), idempotencyKey],
    );
  }

  private async failedBefore(episodeId: string, step: string): Promise<number> {
    const rows = await this.dataSource.query<Array<{ n: number }>>(
      `SELECT count(*)::int AS n FROM demo_rebalance_log WHERE episode_id = $1 AND step = $2`,
      [episodeId, `${step}:failed`],
    );
    return rows[0]?.n ?? 0;
  }
}
