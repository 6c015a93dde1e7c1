import type { CanActivate, DynamicModule, ForwardReference, Type } from '@nestjs/common';

/** Options of `CycliumOpsModule.forRoot`: where the page lives and who may use it. */
export interface CycliumOpsOptions {
  /** Where the page and its API are mounted, below any global prefix. Default `ops`. */
  path?: string;
  /**
   * Who may see and steer the cluster: the host's guard, as a class (built by Nest, with `imports`
   * for its dependencies) or an instance. `false` mounts the page unprotected, for a process
   * reachable only from a trusted network (the demo on 127.0.0.1). There is no default: a page
   * that cancels work must not be open by accident.
   */
  guard: Type<CanActivate> | CanActivate | false;
  /**
   * The host names (no port) the page and its API answer under, such as `['ops.example.com']`;
   * a request naming any other `Host` is refused (403). Set it wherever the page is reachable from
   * a browser: without it, a DNS name its attacker rebinds to this server's address is the page's
   * own origin to the browser, so neither a loopback-only guard nor the cross-site check can tell
   * that page from the operator's. Unset: any host name.
   */
  allowedHosts?: readonly string[];
  /**
   * Whose episodes the page and its API show and act on: `'own'` (the default) only those of this
   * node's stack and env, so a team's page in a database shared by several stacks or envs cannot
   * read or cancel another's work; `'all'` every stack and env (the list's `stack` and `env`
   * filters then choose). Under `'own'`, an episode of another scope answers 404 and a filter
   * naming another scope 403.
   */
  scope?: 'own' | 'all';
  /** Modules the guard class depends on. */
  imports?: Array<Type<unknown> | DynamicModule | Promise<DynamicModule> | ForwardReference>;
}

export const CYCLIUM_OPS_OPTIONS = Symbol('CYCLIUM_OPS_OPTIONS');
export const CYCLIUM_OPS_HOST_GUARD = Symbol('CYCLIUM_OPS_HOST_GUARD');

/** The header every state-changing request carries: a cross-site form or image cannot send it. */
export const OPS_CSRF_HEADER = 'x-cyclium-ops';
