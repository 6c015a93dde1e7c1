import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { goneAfterMs } from '../options/node-liveness.js';
import { EpisodeVersionMoves, type VersionInFlight } from '../episodes/episode-version-moves.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';

/** Where a live node runs: its stack and env (NULL: the default). */
interface NodeScope {
  stack: string | null;
  env: string | null;
}

/**
 * The versions live nodes run, each with the scopes of the nodes that run it: whether an episode
 * pinned to a version has a node that takes it is read in the episode's env (envs never mix) and
 * stack (a node without a stack, or an episode without one, overlaps every stack), as the due
 * requests a node takes are.
 */
export class LiveVersions {
  constructor(private readonly scopes: ReadonlyMap<string, readonly NodeScope[]>) {}

  /** Whether a live node of `env` whose stack covers `stack` runs that expectation at `version`. */
  runs(
    actorId: string,
    expectationId: string,
    version: string,
    env: string | null,
    stack: string | null,
  ): boolean {
    return (this.scopes.get(`${actorId}/${expectationId}@${version}`) ?? []).some(
      (n) => n.env === env && (n.stack === null || stack === null || n.stack === stack),
    );
  }
}

/**
 * What the live nodes declare they run (cyclium_nodes.expectations -> 'hosted'), as
 * `actor/expectation@version` for each version, with their stacks and envs: what an operator
 * reads to see whether an episode pinned to a version has a node that runs it.
 */
@Injectable()
export class HostedVersions {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly episodes: EpisodeVersionMoves,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * The versions of this node's scope's episodes in flight, by expectation, with their counts and
   * whether a live node of this env (and stack) runs (or accepts) each.
   */
  async inFlight(): Promise<Array<VersionInFlight & { hosted: boolean }>> {
    const [versions, live] = await Promise.all([
      this.episodes.inFlight(this.options.stackSlug, this.options.env),
      this.live(),
    ]);
    return versions.map((v) => ({
      ...v,
      hosted: live.runs(
        v.actorId,
        v.expectationId,
        v.version,
        this.options.env,
        this.options.stackSlug,
      ),
    }));
  }

  /** Every version a node beating within the recovery's gone window runs, with where it runs. */
  async live(): Promise<LiveVersions> {
    const { rows } = await this.database.sql.query<{
      entry: string;
      stack: string | null;
      env: string | null;
    }>(
      `SELECT DISTINCT h.actor || '/' || x.entry AS entry, n.stack, n.env
         FROM cyclium_nodes n
        CROSS JOIN LATERAL jsonb_each(coalesce(n.expectations -> 'hosted', '{}')) AS h (actor, list)
        CROSS JOIN LATERAL jsonb_array_elements_text(h.list) AS x (entry)
        WHERE n.last_seen_at > now() - make_interval(secs => $1::double precision / 1000)
          AND x.entry LIKE '%@%'`,
      [goneAfterMs(this.options)],
    );
    const scopes = new Map<string, NodeScope[]>();
    for (const { entry, stack, env } of rows) {
      const list = scopes.get(entry) ?? [];
      list.push({ stack, env });
      scopes.set(entry, list);
    }
    return new LiveVersions(scopes);
  }
}
