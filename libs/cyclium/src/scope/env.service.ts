import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { scopeKey } from './scope-key.js';

/** The world this node operates in within a shared database. */
@Injectable()
export class Env {
  constructor(@Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions) {}

  /** `null` when unset or empty: the default env. */
  current(): string | null {
    return this.options.env;
  }

  /** `key:<env>` when this node has an env, the key unchanged otherwise; `null` stays `null`. */
  scopeKey(key: string): string;
  scopeKey(key: null): null;
  scopeKey(key: string | null): string | null;
  scopeKey(key: string | null): string | null {
    return scopeKey(key, this.options.env);
  }
}
