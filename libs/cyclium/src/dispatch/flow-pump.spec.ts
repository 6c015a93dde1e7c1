import { describe, expect, it } from '@jest/globals';
import { Logger } from '@nestjs/common';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { EpisodeRunner } from '../episodes/episode-runner.service.js';
import type { Admission, AdmissionRequest, FlowAdmissions } from '../episodes/flow-admissions.js';
import type { ThrottledInserts } from '../episodes/throttled-inserts.js';
import type { RegisteredActor, RegisteredExpectation } from '../actors/registered-actor.js';
import { FlowPump } from './flow-pump.js';
import type { SlotRuns } from './slot-runs.interface.js';

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const limited = (id: string) =>
  ({
    actorId: 'a',
    id,
    options: { concurrency: { limit: 1 } },
  }) as unknown as RegisteredExpectation;

/**
 * A flow pump for one actor of `max` slots whose backlog probes and admissions the test answers by
 * hand; `running` counts the slots taken (reserved or launched), and launched runs never end.
 */
function pumpOf(max: number, expectationIds: string[]) {
  const expectations = expectationIds.map(limited);
  const actor = {
    id: 'a',
    expectations: new Map(expectations.map((e) => [e.id, e])),
  } as unknown as RegisteredActor;
  const probes: Array<{ request: AdmissionRequest; answer: Deferred<boolean> }> = [];
  const admissions: Array<{ request: AdmissionRequest; answer: Deferred<Admission> }> = [];
  const flow = {
    inOneStatement: true,
    backlog: (request: AdmissionRequest) => {
      const answer = deferred<boolean>();
      probes.push({ request, answer });
      return answer.promise;
    },
    admit: (request: AdmissionRequest) => {
      const answer = deferred<Admission>();
      admissions.push({ request, answer });
      return answer.promise;
    },
  };
  const state = { running: 0, launched: [] as string[], settled: deferred<void>() };
  const slots: SlotRuns = {
    free: () => Math.max(0, max - state.running),
    reserve: () => state.running++,
    unreserve: (_actorId, count = 1) => (state.running -= count),
    release: () => state.running--,
    pump: () => state.settled.resolve(),
    noteQueued: () => undefined,
    starting: (start) => start,
    launch: (_actor, episode) => state.launched.push(episode.id),
  };
  const pump = new FlowPump(
    flow as unknown as FlowAdmissions,
    {} as EpisodeRunner,
    {} as ThrottledInserts,
    null,
    slots,
    new Logger('flow-pump.spec'),
  );
  const look = () => {
    state.settled = deferred<void>();
    pump.note(actor.id);
    pump.take(actor);
    return state.settled.promise;
  };
  return { state, probes, admissions, look, stop: () => pump.stop() };
}

const admitted = (...ids: string[]): Admission => ({
  admitted: ids.map((id) => ({
    episode: { id } as EpisodeRow,
    grant: {} as AcquireResult,
    resumed: false,
  })),
  retryMs: null,
});

/** Lets the pump's chained promises run. */
const turns = async (n = 5) => {
  for (let i = 0; i < n; i++) await Promise.resolve();
};

describe('FlowPump', () => {
  it('probes for a backlog holding no slot: fresh triggers keep the free slots', async () => {
    const { state, probes, admissions, look } = pumpOf(4, ['x']);
    const settled = look();
    await turns();
    expect(probes).toHaveLength(1);
    // The probe is in flight: a fresh trigger of this node still finds all four slots.
    expect(state.running).toBe(0);
    probes[0]?.answer.resolve(false);
    await settled;
    expect(admissions).toHaveLength(0);
    expect(state.running).toBe(0);
  });

  it('reserves slots only for an admission, and keeps the one it launched', async () => {
    const { state, probes, admissions, look } = pumpOf(4, ['x']);
    const settled = look();
    await turns();
    probes[0]?.answer.resolve(true);
    await turns();
    expect(admissions).toHaveLength(1);
    // One slot stays out of the admission for a fresh trigger of another expectation.
    expect(admissions[0]?.request.max).toBe(3);
    expect(state.running).toBe(3);
    admissions[0]?.answer.resolve(admitted('e1'));
    await settled;
    expect(state.launched).toEqual(['e1']);
    expect(state.running).toBe(1);
  });

  it('an admission failing after another launched leaves the launched run its slot', async () => {
    const { state, probes, admissions, look, stop } = pumpOf(4, ['x', 'y']);
    const settled = look();
    await turns();
    probes[0]?.answer.resolve(true);
    await turns();
    probes[1]?.answer.resolve(true);
    await turns();
    admissions[0]?.answer.resolve(admitted('e1'));
    await turns();
    expect(admissions).toHaveLength(2);
    admissions[1]?.answer.reject(new Error('the database went away'));
    await settled;
    expect(state.launched).toEqual(['e1']);
    // e1 still runs in its slot: only the unused reservations came back.
    expect(state.running).toBe(1);
    stop();
  });
});
