import { Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { CycliumStatus, type HealthOptions } from './cyclium-status.service.js';

/**
 * Cyclium's Terminus health indicator, one verdict per Kubernetes probe:
 * - `isLive` (livenessProbe): `up` whenever the process answers. The database being away, the host
 *   pool being busy or the bus being cut off never make it `down`: a restart cures none of them,
 *   and during an outage it would restart every node at once.
 * - `isReady` (readinessProbe): `down` from the start of a drain, and while the database does not
 *   answer, the bus's LISTEN connection is down or degraded, its reader fails or claim renewals
 *   fail; the details list the failed checks (`failing`, see ReadinessCheck) and why.
 * `isHealthy` is `isReady` under its older name. Details say who the node is and what it does
 * either way.
 *
 * ```ts
 * @Get('live') @HealthCheck() live() {
 *   return this.health.check([() => this.cyclium.isLive('cyclium')]);
 * }
 * @Get('ready') @HealthCheck() ready() {
 *   return this.health.check([() => this.cyclium.isReady('cyclium')]);
 * }
 * ```
 */
@Injectable()
export class CycliumHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly status: CycliumStatus,
  ) {}

  /** The livenessProbe verdict: `up` whenever the process answers (see above). */
  isLive<const Key extends string = 'cyclium'>(
    key: Key = 'cyclium' as Key,
  ): HealthIndicatorResult<Key> {
    return this.indicators.check(key).up({ ...this.status.liveness().status });
  }

  /** The readinessProbe verdict: `down` while a readiness check fails (see above). */
  async isReady<const Key extends string = 'cyclium'>(
    key: Key = 'cyclium' as Key,
    options: HealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const report = await this.status.readiness(options);
    const session = this.indicators.check(key);
    const details = { databaseMs: report.databaseMs, ...report.status };
    return report.ready
      ? session.up(details)
      : session.down({ reason: report.reasons.join('; '), failing: report.failing, ...details });
  }

  /** The readiness verdict (see isReady), under its older name. */
  isHealthy<const Key extends string = 'cyclium'>(
    key: Key = 'cyclium' as Key,
    options: HealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    return this.isReady(key, options);
  }
}
