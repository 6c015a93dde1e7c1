import { describe, expect, it } from '@jest/globals';
import { DatabaseUnavailableError, holdsWork, isDataFault } from './database-errors.js';

const pgError = (code: string) => Object.assign(new Error(`error ${code}`), { code });
/** As TypeORM wraps a driver error. */
const wrapped = (code: string) =>
  Object.assign(new Error('QueryFailedError'), { driverError: pgError(code) });

describe('holdsWork and isDataFault (rule 13)', () => {
  it.each([
    ['57014', 'statement timeout'],
    ['55P03', 'lock timeout'],
    ['40001', 'serialization failure'],
    ['40P01', 'deadlock'],
    ['25006', 'read-only transaction after a failover'],
    ['53100', 'disk full'],
    ['42501', 'insufficient privilege'],
    ['42P01', 'missing table'],
    ['XX000', 'internal error'],
  ])('holds the work on %s (%s)', (code) => {
    expect(holdsWork(pgError(code))).toBe(true);
    expect(holdsWork(wrapped(code))).toBe(true);
    expect(isDataFault(pgError(code))).toBe(false);
  });

  it.each([
    ['22P02', 'invalid text representation'],
    ['22003', 'numeric value out of range'],
    ['23514', 'check violation'],
    ['23502', 'not-null violation'],
  ])("lets the work's own data fault on %s (%s) skip it", (code) => {
    expect(holdsWork(pgError(code))).toBe(false);
    expect(isDataFault(wrapped(code))).toBe(true);
  });

  it('holds on an outage, and leaves an error that is not the database alone', () => {
    expect(holdsWork(new DatabaseUnavailableError('x', pgError('ECONNREFUSED')))).toBe(true);
    expect(holdsWork(new TypeError('bad input'))).toBe(false);
    expect(holdsWork(Object.assign(new Error('x'), { code: 'ERR_INVALID_ARG_TYPE' }))).toBe(false);
  });
});
