import { Controller, Get, Logger, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheck, HealthCheckService, type HealthCheckResult } from '@nestjs/terminus';
import { CycliumHealthIndicator } from '@cyclium/nestjs/health';

/**
 * `GET /health/live` (livenessProbe): 200 whenever the process answers, database or not.
 * `GET /health/ready` (readinessProbe) and `GET /health`: 503 from the start of a drain, and while
 * the database is away, the bus is cut off or degraded, its reader fails or claim renewals fail.
 * A failed probe logs one short line naming what failed (Terminus's own report dump is off in AppModule).
 */
@Controller('health')
export class HealthController {
  private readonly logger = new Logger('Health');

  constructor(
    private readonly health: HealthCheckService,
    private readonly cyclium: CycliumHealthIndicator,
  ) {}

  @Get('live')
  @HealthCheck()
  live() {
    return this.probe('liveness', () => this.health.check([() => this.cyclium.isLive('cyclium')]));
  }

  @Get('ready')
  @HealthCheck()
  ready() {
    return this.probe('readiness', () =>
      this.health.check([() => this.cyclium.isReady('cyclium')]),
    );
  }

  /** Readiness, for whatever already polls `/health`. */
  @Get()
  @HealthCheck()
  check() {
    return this.ready();
  }

  private async probe(
    name: string,
    run: () => Promise<HealthCheckResult>,
  ): Promise<HealthCheckResult> {
    try {
      return await run();
    } catch (error) {
      if (error instanceof ServiceUnavailableException)
        this.logger.warn(`${name} failed: ${failedChecks(error.getResponse())}`);
      throw error;
    }
  }
}

/** `database: no answer within 1500 ms`: each down indicator's reason (Cyclium's lists its failed checks), not the whole report. */
export function failedChecks(report: unknown): string {
  const { status, error } = (report ?? {}) as Partial<HealthCheckResult>;
  if (status === 'shutting_down') return 'the application is shutting down';
  const down = Object.entries(error ?? {}).map(([key, details]) => {
    const reason =
      (details as { reason?: unknown; message?: unknown }).reason ??
      (details as { message?: unknown }).message;
    return typeof reason === 'string' ? reason.split('\n', 1)[0] : `${key} is down`;
  });
  return down.length > 0 ? down.join('; ') : 'no indicator said why';
}
