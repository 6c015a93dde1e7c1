import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';

/**
 * The host's TypeORM DataSource, looked up by name once every provider exists. Resolving it
 * lazily keeps `forRootAsync` free to decide `dataSource` at runtime.
 */
@Injectable()
export class CycliumDataSource implements OnModuleInit {
  private resolved: DataSource | undefined;

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  onModuleInit(): void {
    this.get();
  }

  get(): DataSource {
    if (this.resolved) return this.resolved;
    const name = this.options.dataSource;
    try {
      this.resolved = this.moduleRef.get<DataSource>(getDataSourceToken(name), { strict: false });
    } catch {
      const which = name ? `the TypeORM DataSource named "${name}"` : 'the default TypeORM DataSource';
      throw new CycliumConfigError([
        `dataSource: CycliumModule could not find ${which}; import TypeOrmModule.forRoot(...) in the host app`,
      ]);
    }
    return this.resolved;
  }
}
