import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';

/**
 * `BENCH_OTEL=1`: the SDK registered as a host would, collecting every 10 s into memory, so a
 * benchmark measures what feeding the instruments costs. Registered before any app is created.
 */
export function registerBenchMetrics(): MeterProvider {
  const reader = new PeriodicExportingMetricReader({
    exporter: new InMemoryMetricExporter(AggregationTemporality.DELTA),
    exportIntervalMillis: 10_000,
  });
  const provider = new MeterProvider({ readers: [reader] });
  metrics.setGlobalMeterProvider(provider);
  return provider;
}
