import { Module, type CanActivate, type DynamicModule, type Provider } from '@nestjs/common';
import { RouterModule } from '@nestjs/core';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import { OpsBulkActions } from './bulk-actions.service.js';
import { OpsAccessGuard } from './ops-access.guard.js';
import { OpsClusterController } from './ops-cluster.controller.js';
import { OpsEpisodesController } from './ops-episodes.controller.js';
import {
  CYCLIUM_OPS_HOST_GUARD,
  CYCLIUM_OPS_OPTIONS,
  type CycliumOpsOptions,
} from './ops-options.interface.js';
import { OpsPageController } from './ops-page.controller.js';
import { OpsActorsController } from './ops-actors.controller.js';
import { OpsScope } from './ops-scope.service.js';
import { EpisodeViews } from './episode-views.service.js';
import { OpsVersionsController } from './ops-versions.controller.js';
import { OperatorActions } from './operator-actions.service.js';
import { OpsWorkflowsController } from './ops-workflows.controller.js';

/**
 * The operations page and its JSON API, mounted at `path` (default `ops`) behind the host's guard.
 * Off unless imported; import it next to `CycliumModule.forRoot(...)`, whose services it reads.
 */
@Module({})
export class CycliumOpsModule {
  /** Mounts the page and its API at `options.path`, behind `options.guard`. */
  static forRoot(options: CycliumOpsOptions): DynamicModule {
    const path = checkedPath(options);
    const guard = options.guard;
    const hostGuard: Provider =
      guard === false
        ? { provide: CYCLIUM_OPS_HOST_GUARD, useValue: null }
        : typeof guard === 'function'
          ? { provide: CYCLIUM_OPS_HOST_GUARD, useExisting: guard }
          : { provide: CYCLIUM_OPS_HOST_GUARD, useValue: guard satisfies CanActivate };
    return {
      module: CycliumOpsModule,
      imports: [
        RouterModule.register([{ path, module: CycliumOpsModule }]),
        ...(options.imports ?? []),
      ],
      controllers: [
        OpsClusterController,
        OpsEpisodesController,
        OpsVersionsController,
        OpsActorsController,
        OpsWorkflowsController,
        OpsPageController,
      ],
      providers: [
        { provide: CYCLIUM_OPS_OPTIONS, useValue: options },
        ...(typeof guard === 'function' ? [guard] : []),
        hostGuard,
        OpsAccessGuard,
        OperatorActions,
        OpsScope,
        EpisodeViews,
        OpsBulkActions,
      ],
    };
  }
}

function checkedPath(options: CycliumOpsOptions): string {
  const problems: string[] = [];
  const guard = options?.guard as unknown;
  if (
    guard !== false &&
    typeof guard !== 'function' &&
    typeof (guard as CanActivate | null)?.canActivate !== 'function'
  ) {
    problems.push(
      'CycliumOpsModule: guard must be a CanActivate class or instance, or false to mount the ' +
        'page unprotected',
    );
  }
  const hosts = options?.allowedHosts as unknown;
  if (
    hosts !== undefined &&
    (!Array.isArray(hosts) ||
      hosts.length === 0 ||
      !hosts.every((h) => typeof h === 'string' && /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)$/.test(h)))
  ) {
    problems.push(
      `CycliumOpsModule: allowedHosts must be a non-empty list of host names without ports, such ` +
        `as ['localhost', '127.0.0.1', '[::1]'] (got ${JSON.stringify(hosts)})`,
    );
  }
  const scope = options?.scope as unknown;
  if (scope !== undefined && scope !== 'own' && scope !== 'all') {
    problems.push(
      `CycliumOpsModule: scope must be 'own' (this node's stack and env, the default) or 'all' ` +
        `(got ${JSON.stringify(scope)})`,
    );
  }
  const path = options?.path ?? 'ops';
  if (typeof path !== 'string' || !/^\/?[A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*\/?$/.test(path)) {
    problems.push(
      `CycliumOpsModule: path must be a URL path such as 'ops' or 'admin/cyclium' (got ` +
        `${JSON.stringify(path)})`,
    );
  }
  if (problems.length > 0) throw new CycliumConfigError(problems);
  return path;
}
