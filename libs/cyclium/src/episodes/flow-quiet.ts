import { Injectable } from '@nestjs/common';
import type { Statement } from '../sql/statement.js';
import type { EpisodeRow } from './episode-context.interface.js';

type Limited = Pick<EpisodeRow, 'id' | 'actorId' | 'expectationId' | 'sourceEnv' | 'flowKey'>;

/** A `flow_quiet` CTE asked in an end's statement, and how to read its answer. */
export interface QuietQuestion {
  /** The CTE's body: one cyclium_flow_quiet call per expectation and env of the ends. */
  body: string;
  /** The select list item that returns the answers, as the array `flow_quiet`. */
  column: string;
  /** Records the answers of the statement's first row, for the episodes that ended. */
  answered(row: Record<string, unknown> | undefined, ended: readonly Limited[]): void;
}

/**
 * Which limited episodes ended while nothing of their expectation was throttled. Such an end frees
 * a place nobody waits for, so the node skips the look it would make after it (ActorSlots); the
 * question rides in the end's own statement (cyclium_flow_quiet), so an end without a backlog costs
 * no statement more than an unlimited one. An end that could not ask (an admission held the lock)
 * or that found rows looks as before.
 */
@Injectable()
export class FlowQuiet {
  private readonly quiet = new Set<string>();

  /** The question for `episodes`' ends, or null when none of them is limited. */
  ask(statement: Statement, episodes: readonly Limited[]): QuietQuestion | null {
    const groups = new Map<string, Limited>();
    for (const e of episodes) if (e.flowKey !== null) groups.set(groupOf(e), e);
    if (groups.size === 0) return null;
    const asked = [...groups.keys()];
    const rows = [...groups.values()];
    const input = statement.arrays([
      [rows.map((e) => e.actorId), 'text[]'],
      [rows.map((e) => e.expectationId), 'text[]'],
      [rows.map((e) => e.sourceEnv), 'text[]'],
    ]);
    return {
      body: `SELECT q.n, cyclium_flow_quiet(q.actor, q.expectation, q.env) AS quiet
               FROM unnest(${input}) WITH ORDINALITY AS q (actor, expectation, env, n)`,
      column: `(SELECT array_agg(f.quiet ORDER BY f.n) FROM flow_quiet f) AS flow_quiet`,
      answered: (row, ended) => {
        const answers = row?.flow_quiet;
        if (!Array.isArray(answers)) return;
        for (const e of ended)
          if (e.flowKey !== null && answers[asked.indexOf(groupOf(e))] === true)
            this.quiet.add(e.id);
      },
    };
  }

  /** True (once) when the end of episode `id` found nothing throttled. */
  take(id: string): boolean {
    return this.quiet.delete(id);
  }
}

function groupOf(e: Limited): string {
  return JSON.stringify([e.actorId, e.expectationId, e.sourceEnv]);
}
