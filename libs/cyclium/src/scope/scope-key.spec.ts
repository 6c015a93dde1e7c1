import { describe, expect, it } from '@jest/globals';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { Env } from './env.service.js';
import { scopeKey } from './scope-key.js';
import { StackSlug } from './stack-slug.service.js';

describe('scopeKey', () => {
  it('appends :<env> when an env is set', () => {
    expect(scopeKey('event:a:b:123', 'rc')).toBe('event:a:b:123:rc');
  });

  it('leaves the key unchanged without an env, and null stays null', () => {
    expect(scopeKey('event:a:b:123', null)).toBe('event:a:b:123');
    expect(scopeKey('event:a:b:123', undefined)).toBe('event:a:b:123');
    expect(scopeKey(null, 'rc')).toBeNull();
  });
});

describe('Env and StackSlug', () => {
  it('report null when unset or empty', () => {
    for (const value of [undefined, null, '']) {
      const options = resolveCycliumOptions({ env: value, stackSlug: value });
      expect(new Env(options).current()).toBeNull();
      expect(new StackSlug(options).current()).toBeNull();
      expect(new Env(options).scopeKey('k')).toBe('k');
    }
  });

  it('report and scope with the configured values', () => {
    const options = resolveCycliumOptions({ env: 'demo', stackSlug: 'stack_b' });
    expect(new Env(options).current()).toBe('demo');
    expect(new Env(options).scopeKey('k')).toBe('k:demo');
    expect(new Env(options).scopeKey(null)).toBeNull();
    expect(new StackSlug(options).current()).toBe('stack_b');
  });
});
