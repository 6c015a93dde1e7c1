/**
 * A secret shorter than this is refused: an HMAC key should hold at least 256 bits of a random
 * string.
 */
export const MIN_SECRET_CHARS = 32;

/** What is wrong with an `integrity` option, naming the field, or null when it is sound. */
export function integrityProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return 'integrity must be an object { keyId, keys }';
  const { keyId, keys, ...rest } = value as Record<string, unknown>;
  const extra = Object.keys(rest)[0];
  if (extra !== undefined) return `integrity.${extra} is not an integrity option (keyId, keys)`;
  if (
    typeof keys !== 'object' ||
    keys === null ||
    Array.isArray(keys) ||
    Object.keys(keys).length === 0
  ) {
    return 'integrity.keys must be an object of secrets by key id, with at least one key';
  }
  for (const [id, secret] of Object.entries(keys)) {
    if (id === '' || id.includes(':'))
      return (
        `integrity.keys: a key id must be non-empty and hold no ':' (got ` +
        `${JSON.stringify(id)})`
      );
    if (typeof secret !== 'string' || secret.length < MIN_SECRET_CHARS)
      return `integrity.keys.${id} must be a string of at least ${MIN_SECRET_CHARS} characters`;
  }
  if (typeof keyId !== 'string' || !Object.hasOwn(keys, keyId))
    return 'integrity.keyId must name one of integrity.keys';
  return null;
}
