import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

/**
 * The demo's guard for the operations page: only this machine may use it. A real deployment puts
 * its own authentication here (a session, a bearer token, an SSO proxy header it trusts).
 */
@Injectable()
export class LoopbackOnlyGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ socket?: { remoteAddress?: string } }>();
    return LOOPBACK.has(request.socket?.remoteAddress ?? '');
  }
}
