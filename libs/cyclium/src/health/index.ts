export { CycliumHealthIndicator } from './cyclium-health.indicator.js';
export type { HealthOptions, HealthReport, LivenessReport, ReadinessCheck, StatusSnapshot } from './cyclium-status.service.js';
