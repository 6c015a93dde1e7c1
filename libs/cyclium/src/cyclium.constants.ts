/** Injection token for the validated options with every default filled in. */
export const CYCLIUM_OPTIONS = Symbol('CYCLIUM_OPTIONS');

/** Injection token for the claims adapter in use, or `null` when claims are off (passthrough). */
export const CYCLIUM_CLAIMS_ADAPTER = Symbol('CYCLIUM_CLAIMS_ADAPTER');

/**
 * Injection token for the bus transport itself (PostgresBus, LocalBus or the host's), unguarded.
 */
export const CYCLIUM_BUS_TRANSPORT = Symbol('CYCLIUM_BUS_TRANSPORT');

/** Injection token for the CycliumClock: SYSTEM_CLOCK, or the testing kit's TestClock. */
export const CYCLIUM_CLOCK = Symbol('CYCLIUM_CLOCK');
