import { createHash } from 'node:crypto';

/**
 * The NOTIFY channel for one stack and env. Each stack or env is its own world, so each gets its
 * own channel and never wakes the others. The names are hashed because PostgreSQL truncates
 * identifiers at 63 bytes (a truncated LISTEN would silently miss every pg_notify on the full
 * name) and because slugs may hold characters an identifier should not. Every node of a rolling
 * deploy must compute the same name: never change this formula without a migration plan.
 * Empty strings count as unset, as they do in the options.
 */
export function busChannel(stackSlug: string | null, envName: string | null): string {
  if (!stackSlug && !envName) return 'cyclium_bus';
  const digest = createHash('sha256')
    .update(`${stackSlug ?? ''}\u0000${envName ?? ''}`, 'utf8')
    .digest('hex');
  return `cyclium_bus_${digest.slice(0, 16)}`;
}
