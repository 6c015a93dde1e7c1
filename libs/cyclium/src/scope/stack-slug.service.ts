import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';

/**
 * The logical cluster this node belongs to; rows it creates are stamped with it as `source_stack`.
 */
@Injectable()
export class StackSlug {
  constructor(@Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions) {}

  /** `null` when unset or empty: the single-stack default. */
  current(): string | null {
    return this.options.stackSlug;
  }
}
