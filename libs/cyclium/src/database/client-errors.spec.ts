import { describe, expect, it } from '@jest/globals';
import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { keepClientErrorsHandled } from './client-errors.js';

describe('keepClientErrorsHandled', () => {
  it("gives a new client a listener at 'connect': an early 'error' does not throw", () => {
    const pool = new EventEmitter();
    keepClientErrorsHandled(pool as unknown as pg.Pool);
    keepClientErrorsHandled(pool as unknown as pg.Pool);
    const client = new EventEmitter();
    pool.emit('connect', client);
    expect(client.listenerCount('error')).toBe(1);
    expect(() => client.emit('error', new Error('terminating connection'))).not.toThrow();
    // Without it, as pg does with no listener, the same emit throws.
    expect(() => new EventEmitter().emit('error', new Error('terminating connection'))).toThrow();
  });
});
