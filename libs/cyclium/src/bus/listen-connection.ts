import type pg from 'pg';

/** Where to connect and as whom: what a `listenUrl` says instead of the host's pool. */
const ADDRESS = ['host', 'port', 'user', 'password', 'database', 'connectionString'] as const;

/**
 * The settings of the bus's LISTEN connection. Without `listenUrl`, the host pool's. With it, the
 * URL alone says where and as whom (a leftover host user or database from the pooler's settings
 * would be wrong on a direct server); the rest (ssl, application name, timeouts) still applies,
 * unless the URL sets it too.
 */
export function listenConnectionConfig(
  host: pg.ClientConfig,
  listenUrl: string | null,
): pg.ClientConfig {
  if (listenUrl === null) return host;
  const config: pg.ClientConfig = { ...host };
  for (const key of ADDRESS) delete config[key];
  return { ...config, connectionString: listenUrl };
}
