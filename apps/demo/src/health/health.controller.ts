import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { CycliumHealthIndicator } from '@cyclium/nestjs/health';

/** `GET /health`: 200 while the node can do its work, 503 while the database is away, the bus is cut off, or the node drains. */
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly cyclium: CycliumHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.cyclium.isHealthy('cyclium')]);
  }
}
