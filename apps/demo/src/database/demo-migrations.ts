import { DemoRebalanceLog1764400000100 } from './1764400000100-demo-rebalance-log.js';

export { DemoRebalanceLog1764400000100 };

/** The demo's own tables, tracked apart from Cyclium's in `demo_migrations`. */
export const demoMigrations = [DemoRebalanceLog1764400000100];
