import { Inject, Injectable } from '@nestjs/common';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { canonicalJson } from './canonical-json.js';

/** What a signature covers: one kind of row, so a row of one table never passes for another's. */
export type SignedKind =
  'checkpoint' | 'trigger_request' | 'event' | 'node' | 'workflow_instance' | 'episode';

/**
 * Signs and verifies the rows that decide what runs next (the `integrity` option): an HMAC-SHA256
 * over the row's kind and meaningful fields, the ids that bind it to its episode among them, stored
 * as `<keyId>:<base64url>` so a key can be rotated (sign with the new one, keep the old one to
 * verify rows it signed). Without the option nothing is signed and every row passes, as before.
 *
 * Turning the option on in a live system: until the cut-over of this node's scope is recorded
 * (IntegrityCutover, once no live node without the option is left), a row with no signature at
 * all is accepted (`accepts`), since nodes without the option still write such rows; the node
 * that records the cut-over signs those still in flight, and from then on only signed rows pass.
 * A row whose signature does not verify is refused either way.
 */
@Injectable()
export class RowSigner {
  private readonly keyId: string | null;
  private readonly keys: ReadonlyMap<string, Buffer>;
  /** Strict until the boot check says otherwise: nothing runs before it (see IntegrityCutover). */
  private unsignedAccepted = false;

  constructor(@Inject(CYCLIUM_OPTIONS) options: Pick<ResolvedCycliumOptions, 'integrity'>) {
    this.keyId = options.integrity?.keyId ?? null;
    this.keys = new Map(
      Object.entries(options.integrity?.keys ?? {}).map(([id, secret]) => [
        id,
        Buffer.from(secret, 'utf8'),
      ]),
    );
  }

  get enabled(): boolean {
    return this.keyId !== null;
  }

  /** The signature of a row with these fields, or null without the option. */
  sign(kind: SignedKind, fields: readonly unknown[]): string | null {
    if (this.keyId === null) return null;
    const mac = this.mac(this.keys.get(this.keyId) as Buffer, kind, fields);
    return `${this.keyId}:${mac.toString('base64url')}`;
  }

  /**
   * Whether a row with no signature is accepted now: the option is on and its cut-over is not
   * recorded yet.
   */
  get acceptsUnsigned(): boolean {
    return this.keyId !== null && this.unsignedAccepted;
  }

  /**
   * Whether a row refused with this signature deserves one more read: it had none while this node
   * no longer accepts unsigned rows, and the cut-over signs every unsigned row in flight, so a read
   * from before it may be signed now. A row nobody with the key wrote still has none.
   */
  mayBeSignedSince(signature: string | null | undefined): boolean {
    return (
      (signature === null || signature === undefined) &&
      this.keyId !== null &&
      !this.unsignedAccepted
    );
  }

  /** The cut-over's state, as IntegrityCutover finds it: `true` until it is recorded. */
  acceptUnsigned(accept: boolean): void {
    this.unsignedAccepted = accept;
  }

  /**
   * Whether a row that decides what runs next may be acted on: it verifies, or it has no signature
   * at all while unsigned rows are still accepted (before the cut-over). Always true without the
   * option.
   */
  accepts(
    kind: SignedKind,
    fields: readonly unknown[],
    signature: string | null | undefined,
  ): boolean {
    if ((signature === null || signature === undefined) && this.acceptsUnsigned) return true;
    return this.verify(kind, fields, signature);
  }

  /** Whether `signature` is this deployment's over these fields; always true without the option. */
  verify(
    kind: SignedKind,
    fields: readonly unknown[],
    signature: string | null | undefined,
  ): boolean {
    if (this.keyId === null) return true;
    if (typeof signature !== 'string') return false;
    const colon = signature.indexOf(':');
    const key = colon < 0 ? undefined : this.keys.get(signature.slice(0, colon));
    if (!key) return false;
    const given = Buffer.from(signature.slice(colon + 1), 'base64url');
    const expected = this.mac(key, kind, fields);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  private mac(key: Buffer, kind: SignedKind, fields: readonly unknown[]): Buffer {
    return createHmac('sha256', key)
      .update(canonicalJson([kind, ...fields]))
      .digest();
  }
}
