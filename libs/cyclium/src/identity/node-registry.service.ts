import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { hostname } from 'node:os';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { CYCLIUM_VERSION } from '../version.js';
import { OutageLog } from '../database/database-errors.js';
import { NodeIdentity } from './node-identity.service.js';

/**
 * Keeps this node's row in `cyclium_nodes`: upserted at boot, `last_seen_at` refreshed on a timer.
 * The row is for operators and for recovery's "is that node gone?" question; it is never a lock.
 */
@Injectable()
export class NodeRegistry implements OnApplicationBootstrap {
  private readonly logger = new Logger(NodeRegistry.name);
  private readonly outage = new OutageLog(this.logger, 'node beat');
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly identity: NodeIdentity,
    private readonly database: CycliumDataSource,
    private readonly telemetry: CycliumTelemetry,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.register();
    this.timer = setInterval(() => void this.beat(), this.options.nodeBeatIntervalMs);
    this.timer.unref();
  }

  /** Stops beating and removes this node's row: a drained node is gone, and its queued episodes adoptable. */
  async deregister(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.database.sql
      .query(`DELETE FROM cyclium_nodes WHERE node_identity = $1`, [this.identity.name()])
      .catch((error: unknown) => this.logger.warn(`could not deregister the node: ${String(error)}`));
  }

  async register(): Promise<void> {
    const { stackSlug, env, mode } = this.options;
    await this.database.get().query(
      `INSERT INTO cyclium_nodes (node_identity, stack, env, mode, hostname, pid, version, started_at, last_seen_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, now(), now())
       ON CONFLICT (node_identity) DO UPDATE
         SET stack = EXCLUDED.stack, env = EXCLUDED.env, mode = EXCLUDED.mode, hostname = EXCLUDED.hostname,
             pid = EXCLUDED.pid, version = EXCLUDED.version, started_at = now(), last_seen_at = now()`,
      [this.identity.name(), stackSlug, env, mode, hostname(), process.pid, CYCLIUM_VERSION],
    );
    this.telemetry.emit('node.registered', { stack: stackSlug, env, mode });
  }

  /**
   * A missed beat is logged once per outage and retried on the next tick; liveness is advisory,
   * not a lease. A row that went missing (deleted by an operator, a restored database) is written again.
   */
  async beat(): Promise<void> {
    try {
      const { rowCount } = await this.database.sql.query(`UPDATE cyclium_nodes SET last_seen_at = now() WHERE node_identity = $1`, [
        this.identity.name(),
      ]);
      if (rowCount === 0 && this.timer) await this.register();
      this.outage.succeeded();
    } catch (error) {
      this.outage.failed(error);
    }
  }
}
