import { CycliumSchema1764400000000 } from './1764400000000-cyclium-schema.js';
import { CycliumBusPayloads1764400000001 } from './1764400000001-cyclium-bus-payloads.js';
import { CycliumEvents1764400000002 } from './1764400000002-cyclium-events.js';

export { CycliumSchema1764400000000, CycliumBusPayloads1764400000001, CycliumEvents1764400000002 };

/** Add these to your DataSource's `migrations`, in this order. */
export const cycliumMigrations = [CycliumSchema1764400000000, CycliumBusPayloads1764400000001, CycliumEvents1764400000002];
