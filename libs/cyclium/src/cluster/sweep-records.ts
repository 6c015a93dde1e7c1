import { Injectable, Logger } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { errorMessage } from '../sql/database-errors.js';

/** What a node records of its last recovery sweep, for the status API. */
export interface SweepRecord {
  at: Date;
  result: object | null;
  error: string | null;
}

/**
 * Puts each sweep's outcome on this node's `cyclium_nodes` row, where any node's status API reads
 * it.
 */
@Injectable()
export class SweepRecords {
  private readonly logger = new Logger('CycliumRecovery');

  constructor(
    private readonly database: CycliumDataSource,
    private readonly identity: NodeIdentity,
  ) {}

  /** Best effort: a sweep that ran is not undone by a record that could not be written. */
  async record(sweep: SweepRecord): Promise<void> {
    await this.database.sql
      .query(`UPDATE cyclium_nodes SET last_sweep = $2::jsonb WHERE node_identity = $1`, [
        this.identity.name(),
        JSON.stringify(sweep),
      ])
      .catch((error: unknown) =>
        this.logger.debug(
          `could not record the last sweep on this node's row: ${errorMessage(error)}`,
        ),
      );
  }
}
