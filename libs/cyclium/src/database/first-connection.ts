import type { DataSource } from 'typeorm';
import { CycliumStartupError, startupProblem } from './startup-errors.js';
import type { StartupWait } from './startup-wait.js';

/**
 * The connection settings of `dataSource`, for messages: who connects where, never the password.
 */
export function connectionTarget(dataSource: DataSource): string {
  const options = dataSource.options as {
    url?: string;
    host?: string;
    port?: number;
    username?: string;
    database?: string;
  };
  let user = options.username;
  let host = options.host ?? 'localhost';
  let port = String(options.port ?? 5432);
  let database = options.database;
  if (options.url && URL.canParse(options.url)) {
    const url = new URL(options.url);
    user = decodeURIComponent(url.username) || user;
    host = url.hostname || host;
    port = url.port || port;
    database = decodeURIComponent(url.pathname.slice(1)) || database;
  }
  return `user ${user ?? '(default)'} at ${host}:${port}, database ${database ?? '(default)'}`;
}

/**
 * A malformed `url` on the DataSource, named before pg turns it into a lookup of a host called
 * "base".
 */
function urlProblem(dataSource: DataSource): string | undefined {
  const url = (dataSource.options as { url?: unknown }).url;
  if (url === undefined) return undefined;
  if (
    typeof url === 'string' &&
    URL.canParse(url) &&
    ['postgres:', 'postgresql:'].includes(new URL(url).protocol)
  )
    return undefined;
  return 'the DataSource url is not a postgres:// or postgresql:// connection URL';
}

/**
 * Opens a DataSource the host left for later (`manualInitialization: true`): a refusal fails at
 * once, a server not up yet is waited for as `wait` says (see StartupWait).
 */
export async function connectAtBoot(dataSource: DataSource, wait: StartupWait): Promise<void> {
  const malformed = urlProblem(dataSource);
  if (malformed) throw new CycliumStartupError(malformed);
  const target = connectionTarget(dataSource);
  try {
    await wait.run(`connecting (${target})`, () => dataSource.initialize());
  } catch (error) {
    const problem = startupProblem(error);
    if (problem) throw new CycliumStartupError(`${problem} (${target})`, error);
    throw error;
  }
}
