import { Injectable, Logger } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { prepared } from '../sql/sql-executor.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { episodeLabel } from '../episodes/episode-log-lines.js';
import { runsVersion, type ExpectationVersion } from './expectation-version.js';
import { EpisodeHandedBack } from './version-errors.js';

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

/**
 * The version check before an episode's method runs: an episode of a version this code does not
 * run is handed back (EpisodeHandedBack) before anything of it runs, whichever path brought it
 * here; the first run of a versioned expectation records its version. Without `version` on the
 * expectation and on the row, it costs nothing.
 */
@Injectable()
export class EpisodeVersions {
  private readonly logger = new Logger('CycliumVersions');

  constructor(private readonly database: CycliumDataSource) {}

  /** Throws EpisodeHandedBack when this code must not run `episode`; else records its version. */
  async check(episode: EpisodeRow, options: ExpectationVersion): Promise<void> {
    let version = episode.version ?? null;
    if (version === null && options.version !== undefined) {
      const { rows } = await this.database.sql.query<{ version: string | null }>(
        STAMP([episode.id, options.version]),
      );
      version = rows[0]?.version ?? null;
      episode.version = version;
    }
    if (runsVersion(options, version)) return;
    this.logger.warn(
      `${episodeLabel(episode)} started on version ${version}, which this node's code ` +
        `(${options.version ?? 'no version'}) does not accept: left to a node that runs it`,
    );
    throw new EpisodeHandedBack(`version ${version}`, VERSION_HAND_BACK_MS);
  }
}
