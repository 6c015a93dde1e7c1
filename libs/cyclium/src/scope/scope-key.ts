/**
 * Scopes a dedupe key to an env: `key:<env>` when an env is set, the key unchanged otherwise.
 * `null` stays `null` (an episode without a key has nothing to scope).
 */
export function scopeKey(key: string, env: string | null | undefined): string;
export function scopeKey(key: null, env: string | null | undefined): null;
export function scopeKey(key: string | null, env: string | null | undefined): string | null;
export function scopeKey(key: string | null, env: string | null | undefined): string | null {
  if (key === null) return null;
  return env ? `${key}:${env}` : key;
}
