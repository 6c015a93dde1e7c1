import { Module } from '@nestjs/common';
import { claimsAdapterProvider } from './claims/claims-adapter.provider.js';
import { LeaseRenewer } from './claims/lease-renewer.service.js';
import { WorkClaims } from './claims/work-claims.service.js';
import { CYCLIUM_OPTIONS } from './cyclium.constants.js';
import { CycliumDataSource } from './database/cyclium-data-source.service.js';
import { NodeIdentity } from './identity/node-identity.service.js';
import { NodeRegistry } from './identity/node-registry.service.js';
import { CYCLIUM_MODULE_OPTIONS, CycliumConfigurableModule } from './options/cyclium.module-definition.js';
import { resolveCycliumOptions } from './options/resolve-options.js';
import { Env } from './scope/env.service.js';
import { StackSlug } from './scope/stack-slug.service.js';
import { CycliumTelemetry } from './telemetry/telemetry.service.js';

/**
 * `CycliumModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`.
 * Global by default (`isGlobal: false` to opt out). Uses the host's TypeORM DataSource.
 */
@Module({
  providers: [
    { provide: CYCLIUM_OPTIONS, inject: [CYCLIUM_MODULE_OPTIONS], useFactory: resolveCycliumOptions },
    CycliumDataSource,
    NodeIdentity,
    NodeRegistry,
    StackSlug,
    Env,
    CycliumTelemetry,
    claimsAdapterProvider,
    LeaseRenewer,
    WorkClaims,
  ],
  exports: [NodeIdentity, StackSlug, Env, WorkClaims],
})
export class CycliumModule extends CycliumConfigurableModule {}
