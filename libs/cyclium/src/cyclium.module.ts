import { Module } from '@nestjs/common';
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
  ],
  exports: [NodeIdentity, StackSlug, Env],
})
export class CycliumModule extends CycliumConfigurableModule {}
