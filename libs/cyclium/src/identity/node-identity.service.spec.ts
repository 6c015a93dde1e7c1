import { describe, expect, it } from '@jest/globals';
import { hostname } from 'node:os';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { NodeIdentity } from './node-identity.service.js';

const identity = (nodeIdentity?: string | (() => string)) => new NodeIdentity(resolveCycliumOptions({ nodeIdentity }));

describe('NodeIdentity', () => {
  it('returns a configured string', () => {
    expect(identity('node-7').name()).toBe('node-7');
  });

  it('calls a configured function on demand, every time', () => {
    let n = 0;
    const node = identity(() => `dyn-${++n}`);
    expect(n).toBe(0);
    expect(node.name()).toBe('dyn-1');
    expect(node.name()).toBe('dyn-2');
  });

  it('rejects a function that returns nothing usable', () => {
    expect(() => identity(() => '').name()).toThrow('nodeIdentity function must return a non-empty string');
  });

  it('mints one identity per process from hostname, pid and random hex', () => {
    const a = identity().name();
    expect(a).toMatch(new RegExp(`^${hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-${process.pid}-[0-9a-f]{8}$`));
    expect(identity().name()).toBe(a);
  });
});
