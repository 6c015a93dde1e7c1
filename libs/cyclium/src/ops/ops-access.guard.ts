import {
  ForbiddenException,
  Inject,
  Injectable,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import { isObservable, lastValueFrom } from 'rxjs';
import { CYCLIUM_OPS_HOST_GUARD, OPS_CSRF_HEADER } from './ops-options.interface.js';

interface OpsRequest {
  method: string;
  headers: Record<string, string | string[] | undefined>;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Cross-site requests first, then the host's guard. A guard that relies on a cookie would let
 * another site's page cancel episodes through the operator's browser; a state-changing request must
 * therefore carry a custom header (which a cross-site form, image or simple fetch cannot send
 * without a CORS preflight the host never answers) and must not come from another origin.
 */
@Injectable()
export class OpsAccessGuard implements CanActivate {
  constructor(@Inject(CYCLIUM_OPS_HOST_GUARD) private readonly host: CanActivate | null) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const request = context.switchToHttp().getRequest<OpsRequest>();
    if (!SAFE_METHODS.has(request.method.toUpperCase())) refuseCrossSite(request);
    if (!this.host) return true;
    const verdict = this.host.canActivate(context);
    return isObservable(verdict) ? lastValueFrom(verdict) : verdict;
  }
}

function refuseCrossSite(request: OpsRequest): void {
  const header = (name: string) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value[0] : value;
  };
  if (header(OPS_CSRF_HEADER) === undefined)
    throw new ForbiddenException(
      `a state-changing request must carry the ${OPS_CSRF_HEADER} header`,
    );
  if (header('sec-fetch-site') === 'cross-site')
    throw new ForbiddenException('cross-site requests are refused');
  const origin = header('origin');
  const host = header('host');
  if (origin && origin !== 'null' && host && hostOf(origin) !== host)
    throw new ForbiddenException(`requests from ${origin} are refused`);
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}
