import { DiscoveryService } from '@nestjs/core';

/** Marks a provider as the deliverer of one output type: `@OutputAdapter('advisor.summary')`. */
export const OutputAdapter = DiscoveryService.createDecorator<string>();
