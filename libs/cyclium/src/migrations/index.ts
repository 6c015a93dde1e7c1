import { CycliumSchema1764400000000 } from './1764400000000-cyclium-schema.js';

export { CycliumSchema1764400000000 };

/** Add these to your DataSource's `migrations`, in this order. */
export const cycliumMigrations = [CycliumSchema1764400000000];
