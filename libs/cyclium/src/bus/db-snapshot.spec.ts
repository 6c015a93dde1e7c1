import { describe, expect, it } from '@jest/globals';
import { parseSnapshot } from './db-snapshot.js';

describe('parseSnapshot', () => {
  it('reads xmin, xmax and the in-progress list, keeping 64-bit ids exact', () => {
    expect(parseSnapshot('4294967296123:4294967296130:4294967296124,4294967296127')).toEqual({
      text: '4294967296123:4294967296130:4294967296124,4294967296127',
      xmin: '4294967296123',
      xmax: '4294967296130',
      xip: ['4294967296124', '4294967296127'],
    });
  });

  it('reads a snapshot with nothing in progress', () => {
    expect(parseSnapshot('740:740:')).toMatchObject({ xmin: '740', xmax: '740', xip: [] });
  });

  it('refuses anything else', () => {
    expect(() => parseSnapshot('740:740')).toThrow(/not a pg_snapshot/);
    expect(() => parseSnapshot('')).toThrow(/not a pg_snapshot/);
  });
});
