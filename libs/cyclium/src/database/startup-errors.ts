import { errorCode, errorMessage } from '../sql/database-errors.js';

/**
 * Boot could not reach a usable database, for a reason its message states in one line (a wrong
 * password, an unknown database or host, a URL that does not parse, a server that never came up).
 * The stack is left out on purpose: it shows the driver's internals, never the operator's mistake.
 */
export class CycliumStartupError extends Error {
  override readonly name = 'CycliumStartupError';

  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    this.stack = `${this.name}: ${message}`;
  }
}

/** Server refusals that no retry can cure: a wrong password, an unknown role or database. */
const REFUSED = new Set(['28P01', '28000', '3D000']);

/** Why a first connection failed, when no retry could help; undefined for anything else. */
export function startupProblem(error: unknown): string | undefined {
  const code = errorCode(error);
  if (code !== undefined && REFUSED.has(code)) return errorMessage(error);
  if (code === 'ENOTFOUND') {
    const host = (error as { hostname?: unknown }).hostname;
    return typeof host === 'string'
      ? `database host "${host}" not found`
      : 'database host not found';
  }
  if (code === 'ERR_INVALID_URL') return 'the connection URL does not parse';
  return undefined;
}
