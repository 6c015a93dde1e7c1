import type { ResolvedCycliumOptions } from './cyclium-options.interface.js';

/**
 * How long a node may go without a beat before it is gone, as recovery judges it: `staleAfterMs`
 * (the recovery option, or a sweep's own), but never under three beats, since a node's liveness
 * beat is slower than a short staleAfterMs and a beating node must never be called gone.
 */
export function goneAfterMs(
  options: Pick<ResolvedCycliumOptions, 'recovery' | 'nodeBeatIntervalMs'>,
  staleAfterMs = options.recovery.staleAfterMs,
): number {
  return Math.max(staleAfterMs, 3 * options.nodeBeatIntervalMs);
}
