import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import type { CycliumEpisode } from '../entities/episode.entity.js';
import { Env } from '../scope/env.service.js';
import { sameEnv } from '../scope/scope-predicates.js';
import { CycliumFinding } from '../entities/finding.entity.js';
import { rowMapper } from '../entities/row-mapper.js';
import type { FindingAction } from './finding-action.interface.js';

/** Filters for listing findings. */
export interface FindingFilters {
  actorId?: string;
  class?: string;
  subject?: string;
  key?: string;
}

/**
 * The episode a finding action is recorded for: its id, actor and expectation, and the env it lands
 * in.
 */
export type FindingSource = Pick<CycliumEpisode, 'id' | 'actorId' | 'expectationId' | 'sourceEnv'>;

const toFinding = rowMapper(CycliumFinding);

/** Findings persist with the episode's env: each env has its own active finding per key. */
@Injectable()
export class Findings {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly env: Env,
  ) {}

  /**
   * Active findings matching `filters`, in `options.env` (default: this node's env; `null` is the
   * default env, compared strictly).
   */
  async activeFor(
    filters: FindingFilters = {},
    options: { env?: string | null } = {},
  ): Promise<CycliumFinding[]> {
    const env = options.env === undefined ? this.env.current() : options.env;
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_findings
        WHERE status = 'active' AND ${sameEnv('env', '$1')}
          AND ($2::text IS NULL OR actor_id = $2) AND ($3::text IS NULL OR class = $3)
          AND ($4::text IS NULL OR subject = $4) AND ($5::text IS NULL OR finding_key = $5)
        ORDER BY raised_at, id`,
      [
        env,
        filters.actorId ?? null,
        filters.class ?? null,
        filters.subject ?? null,
        filters.key ?? null,
      ],
    );
    return rows.map(toFinding);
  }

  /**
   * The findings an episode raised or cleared, oldest first (the operations page's episode view).
   */
  async forEpisode(episodeId: string): Promise<CycliumFinding[]> {
    const { rows } = await this.database.sql.query(
      `SELECT * FROM cyclium_findings WHERE raised_by_episode_id = $1 OR cleared_by_episode_id = ` +
        `$1 ORDER BY raised_at, id LIMIT 500`,
      [episodeId],
    );
    return rows.map(toFinding);
  }

  /**
   * Applies finding actions on behalf of `episode`, outside its end: they land in the episode's
   * env, whatever this node's (seed 4.3, acting on another env), folded as an end folds them, in
   * one statement. For an operator or a host reacting to an episode of another env or stack.
   */
  async persist(
    actions: FindingAction | readonly FindingAction[],
    episode: FindingSource,
  ): Promise<void> {
    const statement = new Statement('finding_persist');
    const list: readonly FindingAction[] = Array.isArray(actions)
      ? actions
      : [actions as FindingAction];
    const ctes = this.fragments(statement, episode, list, 'true');
    if (ctes.length === 0) return;
    for (const [name, body] of ctes) statement.with(name, body);
    await this.database.sql.query(statement.build('SELECT 1'));
  }

  /**
   * The finding actions of a converging episode as CTEs of its post-converge statement, writing
   * only when `when` holds. Actions on one key are folded in order first (a raise then a clear is a
   * clear; an update after a raise refines the raise), so no row is written twice by one statement.
   */
  fragments(
    statement: Statement,
    episode: FindingSource,
    actions: readonly FindingAction[],
    when: string,
  ): Array<[string, string]> {
    const { raises, updates, clears } = fold(actions);
    const ctes: Array<[string, string]> = [];
    if (raises.length + updates.length + clears.length === 0) return ctes;
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const env = p(episode.sourceEnv, 'text');
    if (clears.length > 0) {
      ctes.push([
        'finding_clears',
        `UPDATE cyclium_findings
          SET status = 'cleared', cleared_at = now(),
              cleared_by_episode_id = ${p(episode.id, 'uuid')}, updated_at = now()
          WHERE finding_key = ANY(${p(clears, 'text[]')}) AND ${sameEnv('env', env)}
            AND status = 'active' AND (${when})
         RETURNING 1`,
      ]);
    }
    const columns = (list: Fields[]) =>
      statement.arrays([
        [list.map((f) => f.key), 'text[]'],
        [list.map((f) => f.class ?? null), 'text[]'],
        [list.map((f) => f.severity ?? null), 'text[]'],
        [list.map((f) => f.subject ?? null), 'text[]'],
        [list.map((f) => f.summary ?? null), 'text[]'],
        [
          list.map((f) => (f.evidence === undefined ? null : JSON.stringify(f.evidence))),
          'jsonb[]',
        ],
      ]);
    if (updates.length > 0) {
      ctes.push([
        'finding_updates',
        `UPDATE cyclium_findings f
            SET class = coalesce(u.class, f.class), severity = coalesce(u.severity, f.severity),
                subject = coalesce(u.subject, f.subject),
                summary = coalesce(u.summary, f.summary),
                evidence = coalesce(u.evidence, f.evidence), updated_at = now()
           FROM unnest(${columns(updates)}) AS u (finding_key, class, severity, subject, summary,
                                                  evidence)
          WHERE f.finding_key = u.finding_key AND ${sameEnv('f.env', env)} AND f.status = 'active'
            AND (${when})
         RETURNING 1`,
      ]);
    }
    if (raises.length > 0) {
      ctes.push([
        'finding_raises',
        `INSERT INTO cyclium_findings
           (actor_id, expectation_id, finding_key, status, class, severity, subject, summary,
            evidence, raised_by_episode_id, env)
         SELECT ${p(episode.actorId, 'text')}, ${p(episode.expectationId, 'text')}, r.finding_key,
                'active', r.class, r.severity,
                r.subject, r.summary, r.evidence, ${p(episode.id, 'uuid')}, ${env}
           FROM unnest(${columns(raises)}) AS r (finding_key, class, severity, subject, summary,
                                                 evidence)
          WHERE (${when})
         ON CONFLICT (finding_key, env) WHERE status = 'active' DO UPDATE
           SET class = EXCLUDED.class, severity = EXCLUDED.severity, subject = EXCLUDED.subject,
               summary = EXCLUDED.summary, evidence = EXCLUDED.evidence, updated_at = now()
         RETURNING 1`,
      ]);
    }
    return ctes;
  }
}

type Fields = Omit<Extract<FindingAction, { op: 'raise' }>, 'op'>;

/** One final action per key, applying the list in order. */
function fold(actions: readonly FindingAction[]): {
  raises: Fields[];
  updates: Fields[];
  clears: string[];
} {
  const last = new Map<string, { op: 'raise' | 'update'; fields: Fields } | { op: 'clear' }>();
  for (const action of actions) {
    const before = last.get(action.key);
    if (action.op === 'clear') {
      last.set(action.key, { op: 'clear' });
    } else if (action.op === 'raise') {
      const { op: _, ...fields } = action;
      last.set(action.key, { op: 'raise', fields });
    } else if (before?.op !== 'clear') {
      // An update refines whatever is pending for the key (a raise stays a raise); after a clear it
      // changes nothing.
      const { op: _, ...fields } = action;
      const merged = before ? { ...before.fields, ...definedOnly(fields) } : fields;
      last.set(action.key, { op: before?.op ?? 'update', fields: merged });
    }
  }
  const raises: Fields[] = [];
  const updates: Fields[] = [];
  const clears: string[] = [];
  for (const [key, entry] of last) {
    if (entry.op === 'clear') clears.push(key);
    else (entry.op === 'raise' ? raises : updates).push({ ...entry.fields, key });
  }
  return { raises, updates, clears };
}

function definedOnly<T extends object>(fields: T): Partial<T> {
  return Object.fromEntries(
    Object.entries(fields).filter(([, v]) => v !== undefined),
  ) as Partial<T>;
}
