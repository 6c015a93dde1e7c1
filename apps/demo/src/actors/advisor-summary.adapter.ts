import { Injectable, Logger } from '@nestjs/common';
import { OutputAdapter, type DeliveryContext, type OutputDeliverer } from '@cyclium/nestjs';
import type { CycliumOutput } from '@cyclium/nestjs/entities';

/** Delivers advisor summaries to the log; a real app would post to chat or a ticket system. */
@Injectable()
@OutputAdapter('advisor.summary')
export class AdvisorSummaryAdapter implements OutputDeliverer<{ summary: string }> {
  private readonly logger = new Logger('AdvisorSummary');

  async deliver(
    output: CycliumOutput & { payload: { summary: string } },
    context: DeliveryContext,
  ): Promise<unknown> {
    this.logger.log(`${output.payload.summary} (idempotency key ${context.idempotencyKey})`);
    return { logged: true };
  }
}
