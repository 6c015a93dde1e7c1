/** Why a claim was lost: see `ClaimLostError`. */
export type ClaimLossReason = 'not_owner' | 'deadline' | 'released';

/**
 * The reason an episode's signal aborts when its lease is gone. `not_owner` means the database no
 * longer shows this holder at this fence with a live lease: the lease may have run out with nobody
 * taking it, or another node may have taken it; the message claims neither.
 */
export class ClaimLostError extends Error {
  override readonly name = 'ClaimLostError';

  constructor(
    readonly key: string,
    readonly fence: number | null,
    readonly reason: ClaimLossReason,
  ) {
    super(
      reason === 'deadline'
        ? `claim ${key} (fence ${fence}) lost: no renewal succeeded before the local deadline`
        : reason === 'released'
          ? `claim ${key} (fence ${fence}) released`
          : `claim ${key} (fence ${fence}) lost: the database no longer shows it held here at ` +
            `this fence`,
    );
  }
}
