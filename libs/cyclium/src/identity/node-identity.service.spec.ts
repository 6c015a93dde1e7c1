import { describe, expect, it } from '@jest/globals';
import { hostname } from 'node:os';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { NodeIdentity } from './node-identity.service.js';

const identity = (nodeIdentity?: string | (() => string)) =>
  new NodeIdentity(resolveCycliumOptions({ nodeIdentity }));

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
    expect(() => identity(() => '').name()).toThrow(
      'nodeIdentity function must return a non-empty string',
    );
  });

  it('mints one identity per node from hostname, pid and random hex, stable while it lives', () => {
    const node = identity();
    const a = node.name();
    expect(a).toMatch(
      new RegExp(
        `^${hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-${process.pid}-[0-9a-f]{8}$`,
      ),
    );
    expect(node.name()).toBe(a);
    // A second node in the same process is another node.
    expect(identity().name()).not.toBe(a);
  });

  it('has a boot id of its own per node, even under a fixed identity', () => {
    expect(identity('node-7').bootId).not.toBe(identity('node-7').bootId);
  });
});
