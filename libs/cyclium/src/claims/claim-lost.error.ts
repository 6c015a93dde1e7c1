export type ClaimLossReason = 'not_owner' | 'deadline' | 'released';

/** The reason an episode's signal aborts when its lease is gone. */
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
          : `claim ${key} (fence ${fence}) lost: another node owns it now`,
    );
  }
}
