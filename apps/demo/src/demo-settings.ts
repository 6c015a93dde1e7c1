import type { CycliumOptions } from '@cyclium/nestjs';

/**
 * The demo runs with claims on and short timings, so crashes and takeovers are visible within a
 * minute. `DEMO_LEASE_SECONDS` tunes the lease (the launcher and the cluster tests set it).
 */
export function demoCycliumSettings(env: NodeJS.ProcessEnv): CycliumOptions {
  return {
    workClaims: 'postgres',
    workClaimsLeaseSeconds: Number(env.DEMO_LEASE_SECONDS ?? 15),
    jitterMs: Number(env.DEMO_JITTER_MS ?? 200),
  };
}
