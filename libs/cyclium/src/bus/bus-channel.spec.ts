import { createHash } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { busChannel } from './bus-channel.js';

describe('busChannel', () => {
  it('is the plain default channel when neither stack nor env is set', () => {
    expect(busChannel(null, null)).toBe('cyclium_bus');
    expect(busChannel('', '')).toBe('cyclium_bus');
  });

  it('hashes stack and env into a short, stable identifier', () => {
    const hash = createHash('sha256').update('blue\u0000rc').digest('hex');
    const expected = `cyclium_bus_${hash.slice(0, 16)}`;
    expect(busChannel('blue', 'rc')).toBe(expected);
    // Pinned: nodes of a rolling deploy must agree on the name across library versions.
    expect(busChannel('blue', 'rc')).toBe('cyclium_bus_5b3a1bd6fa3d5bf6');
    expect(busChannel('blue', 'rc')).toMatch(/^cyclium_bus_[0-9a-f]{16}$/);
  });

  it('gives every stack and env its own world', () => {
    const names = [
      busChannel('a', null),
      busChannel(null, 'a'),
      busChannel('a', 'b'),
      busChannel('b', 'a'),
      busChannel(null, null),
    ];
    expect(new Set(names).size).toBe(names.length);
  });

  it('stays under the 63-byte identifier limit whatever the slug', () => {
    const long = 'stack-'.repeat(50);
    expect(Buffer.byteLength(busChannel(long, 'ünïcödé-env'.repeat(20)))).toBeLessThan(63);
  });
});
