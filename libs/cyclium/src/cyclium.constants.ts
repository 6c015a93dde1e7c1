/** Injection token for the validated options with every default filled in. */
export const CYCLIUM_OPTIONS = Symbol('CYCLIUM_OPTIONS');
