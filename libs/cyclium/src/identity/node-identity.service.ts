import { Inject, Injectable } from '@nestjs/common';
import { randomBytes, randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';

/**
 * Who this node is for every coordination row it writes. Nothing else in the library reads the
 * hostname or pid for ownership: two instances that boot with the same hostname (containers) must
 * still hold separate leases.
 */
@Injectable()
export class NodeIdentity {
  /**
   * Random per node instance, whatever its identity: tells this process apart from another one
   * (a restart, or a misconfigured twin) that runs, or ran, under the same identity.
   */
  readonly bootId = randomUUID();
  /**
   * Minted once per node (one CycliumModule): stable while it lives, different after a restart.
   * Per node rather than per process, so two nodes booted in one process are not one identity.
   */
  private minted: string | undefined;

  constructor(@Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions) {}

  /** This node's identity: the configured one, or the one minted for this process. */
  name(): string {
    const configured = this.options.nodeIdentity;
    if (configured === null) {
      this.minted ??= `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`;
      return this.minted;
    }
    if (typeof configured === 'string') return configured;
    const resolved = configured();
    if (typeof resolved !== 'string' || resolved.trim() === '') {
      throw new CycliumConfigError([
        `nodeIdentity function must return a non-empty string (got ${String(resolved)})`,
      ]);
    }
    return resolved;
  }
}
