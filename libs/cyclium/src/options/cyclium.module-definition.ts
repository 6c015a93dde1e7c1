import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { CycliumOptions } from './cyclium-options.interface.js';

export const {
  ConfigurableModuleClass: CycliumConfigurableModule,
  MODULE_OPTIONS_TOKEN: CYCLIUM_MODULE_OPTIONS,
  OPTIONS_TYPE: CYCLIUM_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: CYCLIUM_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<CycliumOptions>()
  .setClassMethodName('forRoot')
  .setExtras({ isGlobal: true }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
  }))
  .build();
