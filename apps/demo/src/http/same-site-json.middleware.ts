import {
  ForbiddenException,
  Injectable,
  UnsupportedMediaTypeException,
  type NestMiddleware,
} from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** The names this machine's browser and tools reach the demo by (it listens on 127.0.0.1 only). */
export const LOCAL_HOST_NAMES = ['localhost', '127.0.0.1', '[::1]'] as const;
const LOCAL_HOSTS: ReadonlySet<string> = new Set(LOCAL_HOST_NAMES);
const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The host name of a `Host` header or an origin's host (`127.0.0.1:3000` → `127.0.0.1`). */
function hostnameOf(host: string): string {
  return host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : (host.split(':')[0] ?? '');
}

function isJson(contentType: string | undefined): boolean {
  return (contentType ?? '').split(';')[0]?.trim().toLowerCase() === 'application/json';
}

/**
 * The demo's own routes answer only requests a page elsewhere cannot forge:
 * - a `Host` other than this machine's names is refused (403, `field: 'host'`): a DNS name rebound
 *   to 127.0.0.1 would otherwise let a foreign page read and act as if it were local;
 * - a write (POST and the like) with an `Origin` that is not this host, `null` included (a
 *   sandboxed frame, a redirect), is refused (403, `field: 'origin'`);
 * - a write must send `content-type: application/json` (415, `field: 'content-type'`): an HTML
 *   form (url-encoded, multipart, text/plain) or a bodiless cross-site `fetch` needs no preflight,
 *   and JSON does.
 */
@Injectable()
export class SameSiteJsonMiddleware implements NestMiddleware {
  use(request: IncomingMessage, _response: ServerResponse, next: () => void): void {
    const host = request.headers.host ?? '';
    if (!LOCAL_HOSTS.has(hostnameOf(host).toLowerCase()))
      throw new ForbiddenException({
        statusCode: 403,
        message: `Host ${JSON.stringify(host)} is not this machine (localhost, 127.0.0.1 or [::1])`,
        field: 'host',
      });
    if (READS.has(request.method ?? 'GET')) return next();
    const origin = request.headers.origin;
    if (origin !== undefined && !sameOrigin(origin, host))
      throw new ForbiddenException({
        statusCode: 403,
        message: `a write from origin ${JSON.stringify(origin)} is refused: only this host's own pages may write`,
        field: 'origin',
      });
    if (!isJson(request.headers['content-type']))
      throw new UnsupportedMediaTypeException({
        statusCode: 415,
        message: 'a write must send content-type: application/json',
        field: 'content-type',
      });
    next();
  }
}

function sameOrigin(origin: string, host: string): boolean {
  if (!URL.canParse(origin)) return false;
  const url = new URL(origin);
  return ['http:', 'https:'].includes(url.protocol) && url.host === host;
}
