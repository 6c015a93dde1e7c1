import type { Provider } from '@nestjs/common';
import { CYCLIUM_CLAIMS_ADAPTER, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { PostgresClaims } from '../claims/postgres-claims.adapter.js';
import type { WorkClaimsAdapter } from '../claims/work-claims-adapter.interface.js';

export const claimsAdapterProvider: Provider = {
  provide: CYCLIUM_CLAIMS_ADAPTER,
  inject: [CYCLIUM_OPTIONS, CycliumDataSource],
  useFactory: (
    options: ResolvedCycliumOptions,
    database: CycliumDataSource,
  ): WorkClaimsAdapter | null => {
    if (options.workClaims === false) return null;
    if (options.workClaims === 'postgres')
      return new PostgresClaims(database.sql, database.dedicatedSql);
    return options.workClaims;
  },
};
