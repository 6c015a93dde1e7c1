/**
 * What every rule of the checker reads: the run's log and the database's history, indexed, and the
 * few derived facts several rules need (which faults touched an episode, how long an actor had no
 * host while its env was up).
 */
import type { ActorId } from '../node/node-protocol.js';
import { EVENT_RETRY, MAX_ATTEMPTS } from '../node/actor-policies.js';
import type { RunLog, WorkRecord } from '../cluster/run-log.js';
import { opId } from '../schedule/schedule.js';
import type { EpisodeHistory, History } from './audit-reader.js';

export interface Violation {
  rule: string;
  message: string;
  episodeIds: string[];
  eventIds: string[];
}

/** How an expectation ends a run that failed or was orphaned. */
export interface ExpectationSpec {
  policy: 'restart' | 'fail';
  event?: 'fs.work' | 'fs.subject';
  /** Attempts the retry policy allows (1: no retries); a manual trigger's own `retry` wins. */
  attempts: number;
}

export const SPECS: Record<string, ExpectationSpec> = {
  'fs_alpha.job_restart': { policy: 'restart', attempts: 1 },
  'fs_alpha.job_fail': { policy: 'fail', attempts: 1 },
  'fs_alpha.on_work': { policy: 'restart', event: 'fs.work', attempts: EVENT_RETRY.attempts },
  'fs_alpha.on_subject': { policy: 'restart', event: 'fs.subject', attempts: 1 },
  'fs_beta.job_beta': { policy: 'restart', attempts: 1 },
  'fs_beta.on_work_b': { policy: 'fail', event: 'fs.work', attempts: 1 },
};

export { MAX_ATTEMPTS };

/** Milliseconds of slack for comparing this machine's times with the database's. */
export const CLOCK_SLACK_MS = 1_000;

export class CheckContext {
  readonly violations: Violation[] = [];
  /** Work records by operation number. */
  readonly work = new Map<number, WorkRecord>();
  /** Episodes by the op id in their payload. */
  readonly byOp = new Map<string, EpisodeHistory[]>();

  constructor(
    readonly log: RunLog,
    readonly history: History,
  ) {
    for (const record of log.work) this.work.set(record.n, record);
    for (const episode of history.episodes.values()) {
      const list = this.byOp.get(episode.payload.op) ?? [];
      list.push(episode);
      this.byOp.set(episode.payload.op, list);
    }
  }

  get seed(): number {
    return this.log.setup.seed;
  }

  opOf(n: number): string {
    return opId(this.seed, n);
  }

  fail(rule: string, message: string, ids: { episodes?: string[]; events?: string[] } = {}): void {
    this.violations.push({
      rule,
      message,
      episodeIds: ids.episodes ?? [],
      eventIds: ids.events ?? [],
    });
  }

  spec(episode: EpisodeHistory): ExpectationSpec | undefined {
    return SPECS[`${episode.actor}.${episode.expectation}`];
  }

  /** The attempts this episode's retry policy allows: its trigger's own, else its expectation's. */
  attempts(episode: EpisodeHistory): number {
    const record = this.recordOf(episode);
    if (record?.op.kind === 'trigger' && record.op.retryAttempts !== undefined)
      return record.op.retryAttempts;
    return this.spec(episode)?.attempts ?? 1;
  }

  /** The work record of the operation that caused `episode` (by the op id in its payload). */
  recordOf(episode: EpisodeHistory): WorkRecord | undefined {
    const match = /-w(\d+)$/.exec(episode.payload.op);
    return match ? this.work.get(Number(match[1])) : undefined;
  }

  /**
   * The faults that could have cost this episode its run: a kill, drain or crash of the node that
   * owned it while it ran, a database restart or a whole-cluster stop while it ran.
   */
  disturbances(episode: EpisodeHistory): string[] {
    const states = episode.rows.map((r) => ({
      at: r.at,
      status: r.row.status as string,
      owner: r.row.owner_node as string | null,
    }));
    const liveIn = (from: number, to: number, owners: string[] | null) =>
      states.some((s, i) => {
        const until = states[i + 1]?.at ?? Infinity;
        const live = s.status === 'running' || s.status === 'queued';
        return (
          live &&
          s.at <= to &&
          until >= from &&
          (owners === null || (s.owner !== null && owners.includes(s.owner)))
        );
      });
    const found: string[] = [];
    for (const fault of this.log.faults) {
      const to = fault.endAt + CLOCK_SLACK_MS;
      if (fault.kind === 'db_restart' && liveIn(fault.at, to, null))
        found.push(`db_restart at ${iso(fault.at)}`);
      if (
        ['kill', 'term', 'cluster_stop'].includes(fault.kind) &&
        liveIn(fault.at, to, fault.nodeIds)
      ) {
        found.push(`${fault.kind} of ${fault.nodeIds.join(',')} at ${iso(fault.at)}`);
      }
    }
    for (const node of this.log.nodes) {
      if (node.event !== 'exit' || node.exit?.requested) continue;
      if (liveIn(node.at - CLOCK_SLACK_MS, node.at + CLOCK_SLACK_MS, [node.nodeId]))
        found.push(`crash of ${node.nodeId} at ${iso(node.at)}`);
    }
    return found;
  }

  /**
   * Whether some node of `env` and `stack` that reads `actor`'s events (it hosts the actor's event
   * expectations and is not disabled for it) was up at some moment in [from, to].
   */
  eventHostUp(
    actor: ActorId,
    env: string | null,
    stack: string | null,
    from: number,
    to: number,
  ): boolean {
    const entries = this.log.availability;
    return entries.some((entry, i) => {
      const until = entries[i + 1]?.at ?? this.log.quiescedAt;
      if (entry.at > to || until < from) return false;
      return entry.nodes.some((n) => {
        if (n.env !== env || n.stack !== stack || !n.actors.includes(actor)) return false;
        if (actor === 'fs_alpha' && n.legacyAlpha) return false;
        return (n.overrides[actor] ?? n.mode) !== 'disabled';
      });
    });
  }

  /**
   * The longest time during which some node of `env` was up (and not disabled, with `needFull`)
   * while no node of that env and stack hosted `actor` (in full mode for it, with `needFull`).
   */
  longestHostGap(
    actor: ActorId,
    env: string | null,
    stack: string | null,
    needFull: boolean,
  ): number {
    let longest = 0;
    let since: number | null = null;
    const entries = [...this.log.availability, { at: this.log.quiescedAt, nodes: [] }];
    for (const entry of entries) {
      const inEnv = entry.nodes.filter(
        (n) => n.env === env && (!needFull || n.mode !== 'disabled'),
      );
      const hosts = inEnv.filter((n) => {
        if (n.stack !== stack || !n.actors.includes(actor)) return false;
        return !needFull || (n.overrides[actor] ?? n.mode) === 'full';
      });
      const gap = inEnv.length > 0 && hosts.length === 0;
      if (gap && since === null) since = entry.at;
      if (!gap && since !== null) {
        longest = Math.max(longest, entry.at - since);
        since = null;
      }
    }
    return longest;
  }
}

export function iso(ms: number): string {
  return new Date(ms).toISOString().slice(11, 23);
}
