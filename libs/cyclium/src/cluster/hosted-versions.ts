import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';

/**
 * What the live nodes declare they run (cyclium_nodes.expectations -> 'hosted'), as
 * `actor/expectation@version` for each version: what an operator reads to see whether an
 * episode pinned to a version has a node that runs it.
 */
@Injectable()
export class HostedVersions {
  constructor(private readonly database: CycliumDataSource) {}

  /** `actor/expectation@version` of every version a node beating within `goneAfterMs` runs. */
  async live(goneAfterMs: number): Promise<Set<string>> {
    const { rows } = await this.database.sql.query<{ entry: string }>(
      `SELECT DISTINCT h.actor || '/' || x.entry AS entry
         FROM cyclium_nodes n
        CROSS JOIN LATERAL jsonb_each(coalesce(n.expectations -> 'hosted', '{}')) AS h (actor, list)
        CROSS JOIN LATERAL jsonb_array_elements_text(h.list) AS x (entry)
        WHERE n.last_seen_at > now() - make_interval(secs => $1::double precision / 1000)
          AND x.entry LIKE '%@%'`,
      [goneAfterMs],
    );
    return new Set(rows.map((r) => r.entry));
  }
}
