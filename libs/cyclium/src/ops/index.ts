/** `@cyclium/nestjs/ops`: the operations page and its JSON API, off unless imported. */
export { CycliumOpsModule } from './ops.module.js';
export type { CycliumOpsOptions } from './ops-options.interface.js';
