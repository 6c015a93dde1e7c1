import { Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { CycliumStatus, type HealthOptions } from './cyclium-status.service.js';

/**
 * Cyclium's Terminus health indicator: `down` when the database does not answer in time, when the
 * bus's wake-up connection has been down too long, or while the node drains; `up` otherwise. The
 * details say who the node is and what it is doing either way.
 *
 * ```ts
 * @Module({ imports: [TerminusModule], controllers: [HealthController], providers: [CycliumHealthIndicator] })
 * // in the controller:
 * check() { return this.health.check([() => this.cyclium.isHealthy('cyclium')]); }
 * ```
 */
@Injectable()
export class CycliumHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly status: CycliumStatus,
  ) {}

  async isHealthy<const Key extends string = 'cyclium'>(key: Key = 'cyclium' as Key, options: HealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const report = await this.status.health(options);
    const session = this.indicators.check(key);
    const details = { databaseMs: report.databaseMs, ...report.status };
    return report.healthy ? session.up(details) : session.down({ reason: report.reasons.join('; '), ...details });
  }
}
