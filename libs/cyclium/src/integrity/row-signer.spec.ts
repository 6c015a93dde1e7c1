import { describe, expect, it } from '@jest/globals';
import { canonicalJson } from './canonical-json.js';
import { RowSigner } from './row-signer.service.js';

const secret = (c: string) => c.repeat(32);

describe('canonicalJson', () => {
  it('gives one text whatever the key order, as jsonb reorders keys', () => {
    expect(canonicalJson({ b: 1, a: [{ y: null, x: 'é' }], c: undefined })).toBe(
      canonicalJson(JSON.parse('{"a":[{"x":"é","y":null}],"b":1}')),
    );
    expect(canonicalJson({ b: 1, a: 2 })).toBe('{"a":2,"b":1}');
  });
});

describe('RowSigner', () => {
  const signer = new RowSigner({
    integrity: { keyId: 'k2', keys: { k1: secret('a'), k2: secret('b') } },
  });

  it('verifies what it signed, and nothing edited, moved to another row or kind', () => {
    const signature = signer.sign('checkpoint', ['ep-1', 1, 's1', { v: 1 }]);
    expect(signature).toMatch(/^k2:/);
    expect(signer.verify('checkpoint', ['ep-1', 1, 's1', { v: 1 }], signature)).toBe(true);
    expect(signer.verify('checkpoint', ['ep-1', 1, 's1', { v: 2 }], signature)).toBe(false);
    expect(signer.verify('checkpoint', ['ep-2', 1, 's1', { v: 1 }], signature)).toBe(false);
    expect(signer.verify('trigger_request', ['ep-1', 1, 's1', { v: 1 }], signature)).toBe(false);
    expect(signer.verify('checkpoint', ['ep-1', 1, 's1', { v: 1 }], null)).toBe(false);
    expect(signer.verify('checkpoint', ['ep-1', 1, 's1', { v: 1 }], 'k9:AAAA')).toBe(false);
    expect(signer.verify('checkpoint', ['ep-1', 1, 's1', { v: 1 }], 'no-colon')).toBe(false);
  });

  it('verifies rows a retired key signed while that key is listed', () => {
    const old = new RowSigner({ integrity: { keyId: 'k1', keys: { k1: secret('a') } } });
    const signature = old.sign('node', ['n', null, null, 'full', []]);
    expect(signer.verify('node', ['n', null, null, 'full', []], signature)).toBe(true);
    expect(
      new RowSigner({ integrity: { keyId: 'k2', keys: { k2: secret('b') } } }).verify(
        'node',
        ['n', null, null, 'full', []],
        signature,
      ),
    ).toBe(false);
  });

  it('signs nothing and passes everything without the option', () => {
    const off = new RowSigner({ integrity: null });
    expect(off.enabled).toBe(false);
    expect(off.sign('event', ['x'])).toBeNull();
    expect(off.verify('event', ['x'], null)).toBe(true);
  });
});
