import { describe, expect, it } from '@jest/globals';
import { cycliumOptionsFromEnv } from './options-from-env.js';

describe('cycliumOptionsFromEnv', () => {
  it('maps the CYCLIUM_* variables', () => {
    expect(
      cycliumOptionsFromEnv({
        CYCLIUM_NODE_ID: 'n1',
        CYCLIUM_STACK_SLUG: 'stack_a',
        CYCLIUM_ENV: 'rc',
        CYCLIUM_MODE: 'trigger_only',
      }),
    ).toEqual({
      nodeIdentity: 'n1',
      stackSlug: 'stack_a',
      env: 'rc',
      mode: 'trigger_only',
    });
  });

  it('maps the pooler settings, passing a bad boolean on for boot to name', () => {
    const listenUrl = 'postgres://app:secret@db-primary:5432/app';
    expect(
      cycliumOptionsFromEnv({
        CYCLIUM_LISTEN_URL: listenUrl,
        CYCLIUM_PREPARED_STATEMENTS: 'false',
      }),
    ).toEqual({ listenUrl, preparedStatements: false });
    expect(cycliumOptionsFromEnv({ CYCLIUM_PREPARED_STATEMENTS: 'true' })).toEqual({
      preparedStatements: true,
    });
    expect(cycliumOptionsFromEnv({ CYCLIUM_PREPARED_STATEMENTS: 'no' })).toEqual({
      preparedStatements: 'no',
    });
  });

  it('leaves unset and empty variables out, so defaults apply', () => {
    expect(cycliumOptionsFromEnv({ CYCLIUM_NODE_ID: '', PATH: '/bin' })).toEqual({});
  });
});
