import { Injectable, Logger } from '@nestjs/common';
import { OutputAdapter, type DeliveryContext, type OutputDeliverer } from '@cyclium/nestjs';
import type { CycliumOutput } from '@cyclium/nestjs/entities';

/** Delivers rebalance reports to the log, so a test can see each one delivered once. */
@Injectable()
@OutputAdapter('rebalance.report')
export class RebalanceReportAdapter implements OutputDeliverer<{ resource: string }> {
  private readonly logger = new Logger('RebalanceReport');

  async deliver(
    output: CycliumOutput & { payload: { resource: string } },
    context: DeliveryContext,
  ): Promise<unknown> {
    this.logger.log(
      `rebalanced ${output.payload.resource} (idempotency key ${context.idempotencyKey})`,
    );
    return { logged: true };
  }
}
