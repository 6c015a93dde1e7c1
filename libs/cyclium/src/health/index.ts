export { CycliumHealthIndicator } from './cyclium-health.indicator.js';
export type {
  HealthOptions,
  HealthReport,
  LivenessReport,
  ReadinessCheck,
  StatusSnapshot,
} from './cyclium-status.service.js';
export { BusConsumers, type BusConsumerDrop } from './bus-consumers.service.js';
export type { BusConsumerStatus } from './cluster-status.service.js';
