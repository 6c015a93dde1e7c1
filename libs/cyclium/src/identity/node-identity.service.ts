import { Inject, Injectable } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';

let minted: string | undefined;

/** Minted once per process: stable while it lives, different after a restart. */
function mintedIdentity(): string {
  minted ??= `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
  return minted;
}

/**
 * Who this node is for every coordination row it writes. Nothing else in the library reads the
 * hostname or pid for ownership: two instances that boot with the same hostname (containers) must
 * still hold separate leases.
 */
@Injectable()
export class NodeIdentity {
  constructor(@Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions) {}

  name(): string {
    const configured = this.options.nodeIdentity;
    if (configured === null) return mintedIdentity();
    if (typeof configured === 'string') return configured;
    const resolved = configured();
    if (typeof resolved !== 'string' || resolved.trim() === '') {
      throw new CycliumConfigError([`nodeIdentity function must return a non-empty string (got ${String(resolved)})`]);
    }
    return resolved;
  }
}
