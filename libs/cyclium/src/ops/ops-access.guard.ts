import {
  ForbiddenException,
  Inject,
  Injectable,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import { isObservable, lastValueFrom } from 'rxjs';
import {
  CYCLIUM_OPS_HOST_GUARD,
  CYCLIUM_OPS_OPTIONS,
  OPS_CSRF_HEADER,
  type CycliumOpsOptions,
} from './ops-options.interface.js';

interface OpsRequest {
  method: string;
  headers: Record<string, string | string[] | undefined>;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * A `Host` outside `allowedHosts` first, then cross-site requests, then the host's guard. A guard
 * that relies on a cookie would let another site's page cancel episodes through the operator's
 * browser; a state-changing request must therefore carry a custom header (which a cross-site form,
 * image or simple fetch cannot send without a CORS preflight the host never answers) and must come
 * from no other origin: `Origin: null` (a sandboxed frame, a redirect across sites) is refused too.
 */
@Injectable()
export class OpsAccessGuard implements CanActivate {
  private readonly allowedHosts: ReadonlySet<string> | null;

  constructor(
    @Inject(CYCLIUM_OPS_HOST_GUARD) private readonly host: CanActivate | null,
    @Inject(CYCLIUM_OPS_OPTIONS) options: CycliumOpsOptions,
  ) {
    this.allowedHosts = options.allowedHosts
      ? new Set(options.allowedHosts.map((name) => name.toLowerCase()))
      : null;
  }

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const request = context.switchToHttp().getRequest<OpsRequest>();
    if (this.allowedHosts) refuseForeignHost(request, this.allowedHosts);
    if (!SAFE_METHODS.has(request.method.toUpperCase())) refuseCrossSite(request);
    if (!this.host) return true;
    const verdict = this.host.canActivate(context);
    return isObservable(verdict) ? lastValueFrom(verdict) : verdict;
  }
}

function headerOf(request: OpsRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function refuseForeignHost(request: OpsRequest, allowed: ReadonlySet<string>): void {
  const host = headerOf(request, 'host') ?? '';
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0];
  if (!allowed.has((name ?? '').toLowerCase()))
    throw new ForbiddenException(
      `the host name ${JSON.stringify(host)} is not one this page answers`,
    );
}

function refuseCrossSite(request: OpsRequest): void {
  const header = (name: string) => headerOf(request, name);
  if (header(OPS_CSRF_HEADER) === undefined)
    throw new ForbiddenException(
      `a state-changing request must carry the ${OPS_CSRF_HEADER} header`,
    );
  if (header('sec-fetch-site') === 'cross-site')
    throw new ForbiddenException('cross-site requests are refused');
  const origin = header('origin');
  const host = header('host');
  if (origin !== undefined && (origin === 'null' || hostOf(origin) !== host))
    throw new ForbiddenException(`requests from ${origin} are refused`);
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}
