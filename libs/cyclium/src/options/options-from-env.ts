import type { CycliumMode, CycliumOptions } from './cyclium-options.interface.js';

/**
 * Maps the conventional environment variables onto options, so one build can be placed per
 * instance: CYCLIUM_NODE_ID, CYCLIUM_STACK_SLUG, CYCLIUM_ENV, CYCLIUM_MODE, and for a database
 * reached through a pooler CYCLIUM_LISTEN_URL and CYCLIUM_PREPARED_STATEMENTS (`true` or `false`).
 * Unset variables are left out (the option's default applies); values are validated with the rest
 * at boot.
 */
export function cycliumOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): CycliumOptions {
  const options: CycliumOptions = {};
  if (env.CYCLIUM_NODE_ID) options.nodeIdentity = env.CYCLIUM_NODE_ID;
  if (env.CYCLIUM_STACK_SLUG) options.stackSlug = env.CYCLIUM_STACK_SLUG;
  if (env.CYCLIUM_ENV) options.env = env.CYCLIUM_ENV;
  if (env.CYCLIUM_MODE) options.mode = env.CYCLIUM_MODE as CycliumMode;
  if (env.CYCLIUM_LISTEN_URL) options.listenUrl = env.CYCLIUM_LISTEN_URL;
  // Anything but the two words is passed on as it is, so boot names the variable's bad value.
  if (env.CYCLIUM_PREPARED_STATEMENTS)
    options.preparedStatements = booleanOf(env.CYCLIUM_PREPARED_STATEMENTS);
  return options;
}

function booleanOf(value: string): boolean {
  if (value === 'true') return true;
  if (value === 'false') return false;
  return value as unknown as boolean;
}
