export { CycliumHealthIndicator } from './cyclium-health.indicator.js';
export type { HealthOptions, HealthReport, StatusSnapshot } from './cyclium-status.service.js';
