import { describe, expect, it } from '@jest/globals';
import { listenConnectionConfig } from './listen-connection.js';

describe('listenConnectionConfig', () => {
  const host = {
    host: 'pgbouncer',
    port: 6432,
    user: 'app',
    password: 'secret',
    database: 'app',
    connectionString: 'postgres://app:secret@pgbouncer:6432/app',
    ssl: { rejectUnauthorized: true },
    application_name: 'node-1',
  };

  it("is the host pool's settings without a listenUrl", () => {
    expect(listenConnectionConfig(host, null)).toBe(host);
  });

  it('takes where and as whom from the listenUrl alone, and keeps the rest', () => {
    expect(listenConnectionConfig(host, 'postgres://listener:pw@db-primary:5432/app')).toEqual({
      connectionString: 'postgres://listener:pw@db-primary:5432/app',
      ssl: { rejectUnauthorized: true },
      application_name: 'node-1',
    });
  });
});
