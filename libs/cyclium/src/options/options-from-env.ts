import type { CycliumMode, CycliumOptions } from './cyclium-options.interface.js';

/**
 * Maps the conventional environment variables onto options, so one build can be placed per
 * instance: CYCLIUM_NODE_ID, CYCLIUM_STACK_SLUG, CYCLIUM_ENV, CYCLIUM_MODE. Unset variables are
 * left out (the option's default applies); values are validated with the rest at boot.
 */
export function cycliumOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): CycliumOptions {
  const options: CycliumOptions = {};
  if (env.CYCLIUM_NODE_ID) options.nodeIdentity = env.CYCLIUM_NODE_ID;
  if (env.CYCLIUM_STACK_SLUG) options.stackSlug = env.CYCLIUM_STACK_SLUG;
  if (env.CYCLIUM_ENV) options.env = env.CYCLIUM_ENV;
  if (env.CYCLIUM_MODE) options.mode = env.CYCLIUM_MODE as CycliumMode;
  return options;
}
