import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';

let exporter: PrometheusExporter | undefined;

/**
 * Registers the OpenTelemetry SDK with a Prometheus exporter as the global MeterProvider. Call it
 * before NestFactory.create: Cyclium looks for a MeterProvider once, as its module starts. The
 * exporter's own server stays off; MetricsController serves its page on the app's port.
 */
export function registerDemoMetrics(): PrometheusExporter {
  exporter ??= new PrometheusExporter({ preventServerStart: true });
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [exporter] }));
  return exporter;
}

/** The exporter registerDemoMetrics made; null when it was not called. */
export function demoPrometheus(): PrometheusExporter | null {
  return exporter ?? null;
}
