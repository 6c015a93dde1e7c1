import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared } from '../sql/sql-executor.js';
import { runsVersion, type ExpectationVersion } from '../versions/expectation-version.js';

/**
 * How long an episode handed back for its version waits before a node takes it again: the due
 * requests a poll reads are filtered by version, so only a node that runs it takes the wake-up.
 */
export const VERSION_HAND_BACK_MS = 1000;

/**
 * Records the version an episode starts on; the first run of a versioned expectation's episode
 * writes it (whichever run gets there first: its answer is the version recorded).
 */
const STAMP = prepared(
  'episodes_version_stamp',
  `
  WITH stamped AS (
    UPDATE cyclium_episodes SET version = $2 WHERE id = $1 AND version IS NULL RETURNING version)
  SELECT coalesce((SELECT version FROM stamped),
                  (SELECT version FROM cyclium_episodes WHERE id = $1)) AS version`,
);

/** The columns of an episode row the version check reads, and the version it records. */
export interface VersionedEpisode {
  id: string;
  version: string | null;
}

/**
 * The version check before an episode's method runs, whichever path brought the episode here: the
 * first run of a versioned expectation records its version; an episode of a version this code
 * does not run must be handed back before anything of it runs. Without `version` on the
 * expectation and on the row, it costs nothing.
 */
@Injectable()
export class EpisodeVersions {
  constructor(private readonly database: CycliumDataSource) {}

  /**
   * Null when this code may run `episode` (whose `version` it records, when it had none); else
   * the version this code lacks (`version v1`).
   */
  async check(episode: VersionedEpisode, options: ExpectationVersion): Promise<string | null> {
    if (episode.version === null && options.version !== undefined) {
      const { rows } = await this.database.sql.query<{ version: string | null }>(
        STAMP([episode.id, options.version]),
      );
      episode.version = rows[0]?.version ?? null;
    }
    return runsVersion(options, episode.version) ? null : `version ${episode.version}`;
  }
}
