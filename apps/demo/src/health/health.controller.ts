import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { CycliumHealthIndicator } from '@cyclium/nestjs/health';

/**
 * `GET /health/live` (livenessProbe): 200 whenever the process answers, database or not.
 * `GET /health/ready` (readinessProbe) and `GET /health`: 503 from the start of a drain, and while
 * the database is away, the bus is cut off or degraded, its reader fails or claim renewals fail.
 */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly cyclium: CycliumHealthIndicator,
  ) {}

  @Get('live')
  @HealthCheck()
  live() {
    return this.health.check([() => this.cyclium.isLive('cyclium')]);
  }

  @Get('ready')
  @HealthCheck()
  ready() {
    return this.health.check([() => this.cyclium.isReady('cyclium')]);
  }

  /** Readiness, for whatever already polls `/health`. */
  @Get()
  @HealthCheck()
  check() {
    return this.ready();
  }
}
