import { Controller, Get, NotFoundException, Req, Res } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { demoPrometheus } from './metrics-sdk.js';

/** `GET /metrics`: this node's Cyclium instruments in the Prometheus text format. */
@Controller('metrics')
export class MetricsController {
  @Get()
  scrape(@Req() request: IncomingMessage, @Res() response: ServerResponse): void {
    const exporter = demoPrometheus();
    if (!exporter) throw new NotFoundException('metrics are not registered on this node');
    exporter.getMetricsRequestHandler(request, response);
  }
}
