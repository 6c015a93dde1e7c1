import { describe, expect, it } from '@jest/globals';
import { CycliumConfigError } from './cyclium-config.error.js';
import { resolveCycliumOptions } from './resolve-options.js';

const DAY = 86_400_000;
const TIMER = '2147483647 ms (about 24.8 days)';
const WINDOW = '3155760000000 ms (100 years)';
const LEASE = '2147483.647 s (about 24.8 days)';
const PAYLOAD = 'busMaxPayloadBytes must be a whole number of bytes from 1 to 2097152';

const problems = (options: unknown): string[] => {
  try {
    resolveCycliumOptions(options as never);
  } catch (error) {
    if (error instanceof CycliumConfigError) return error.problems;
    throw error;
  }
  return [];
};

describe('resolveCycliumOptions', () => {
  it('fills in every documented default', () => {
    expect(resolveCycliumOptions(undefined)).toEqual({
      nodeIdentity: null,
      workClaims: false,
      workClaimsLeaseSeconds: 120,
      mode: 'full',
      stackSlug: null,
      env: null,
      bus: 'postgres',
      busPollIntervalMs: 10_000,
      busEchoIntervalMs: 10_000,
      busEchoTimeoutMs: 5_000,
      busRetentionMs: 3_600_000,
      busUndispatchedMaxAgeMs: 604_800_000,
      busPublishQueueMax: 10_000,
      busMaxPayloadBytes: 1_048_576,
      listenUrl: null,
      preparedStatements: true,
      jitterMs: 200,
      startedEvents: false,
      metrics: true,
      tracing: true,
      episodeShutdownMs: 5000,
      recovery: {
        onBoot: true,
        settleMs: 120_000,
        staleAfterMs: 120_000,
        intervalMs: 60_000,
        notHostedGraceMs: 3_600_000,
      },
      triggerPollIntervalMs: 5000,
      triggerPollIdleIntervalMs: 30_000,
      triggerPollSourceStack: null,
      triggerPollSourceEnv: null,
      triggerRequestTtlMs: 3_600_000,
      retention: {
        archiveAfter: 604_800_000,
        deleteAfter: 604_800_000,
        batchSize: 1_000,
        intervalMs: 60_000,
      },
      dataSource: undefined,
      checkoutTimeoutMs: 10_000,
      queryTimeoutMs: 30_000,
      startupWaitMs: 120_000,
      nodeBeatIntervalMs: 15_000,
      workflowEngine: true,
      deliveryTimeoutMs: 30_000,
      outputMaxAttempts: 8,
      outputRetryBaseMs: 5_000,
      integrity: null,
    });
  });

  it('refuses a busUndispatchedMaxAgeMs the position flush cannot honour, naming it', () => {
    expect(() => resolveCycliumOptions({ busUndispatchedMaxAgeMs: 999 })).toThrow(
      /busUndispatchedMaxAgeMs must be at least 1000 with bus 'postgres'.*\(got 999\)/,
    );
    expect(resolveCycliumOptions({ busUndispatchedMaxAgeMs: 1_000 }).busUndispatchedMaxAgeMs).toBe(
      1_000,
    );
    // Without the durable bus there are no positions to store.
    expect(
      resolveCycliumOptions({ bus: 'local', busUndispatchedMaxAgeMs: 500 }).busUndispatchedMaxAgeMs,
    ).toBe(500);
  });

  it('idles the trigger poll only with the postgres bus, and never below its interval', () => {
    const idle = (options: Parameters<typeof resolveCycliumOptions>[0]) =>
      resolveCycliumOptions(options).triggerPollIdleIntervalMs;
    expect(idle({})).toBe(30_000);
    expect(idle({ triggerPollIdleIntervalMs: 12_000 })).toBe(12_000);
    // The interval a host chose stays what it gets, unless it chose the idle one too.
    expect(idle({ triggerPollIntervalMs: 200 })).toBe(200);
    expect(idle({ triggerPollIntervalMs: 200, triggerPollIdleIntervalMs: 1_000 })).toBe(1_000);
    expect(idle({ triggerPollIntervalMs: 60_000 })).toBe(60_000);
    // No other bus carries another node's wake-up.
    expect(idle({ bus: 'local' })).toBe(5_000);
    // The database's own wake-ups (signals, events, children) are unsigned, and ignored.
    expect(idle({ integrity: { keyId: 'k1', keys: { k1: 'x'.repeat(32) } } })).toBe(5_000);
    expect(() => idle({ triggerPollIdleIntervalMs: 4_999 })).toThrow(
      /triggerPollIdleIntervalMs must be at least triggerPollIntervalMs \(5000 here\).*4999/,
    );
    expect(() => idle({ triggerPollIdleIntervalMs: 0 })).toThrow(/triggerPollIdleIntervalMs/);
  });

  it(
    'archives no sooner than a trigger can come again: archiveAfter covers the bus replay ' +
      'window and the request TTL',
    () => {
      expect(() => resolveCycliumOptions({ retention: { archiveAfter: 3_600_000 } })).toThrow(
        new RegExp(
          'retention\\.archiveAfter must be at least busUndispatchedMaxAgeMs and ' +
            'triggerRequestTtlMs \\(604800000 here\\).*got 3600000',
        ),
      );
      const shortTtl = {
        busUndispatchedMaxAgeMs: 4_000,
        triggerRequestTtlMs: 5_000,
        retention: { archiveAfter: 4_000 },
      };
      expect(() => resolveCycliumOptions(shortTtl)).toThrow(
        /retention\.archiveAfter.*\(5000 here\)/,
      );
      // Left out, archiveAfter grows to cover a longer replay window instead of failing boot.
      expect(
        resolveCycliumOptions({ busUndispatchedMaxAgeMs: 30 * 86_400_000 }).retention?.archiveAfter,
      ).toBe(30 * 86_400_000);
      const retention = { archiveAfter: 4_000, deleteAfter: null };
      const short = { busUndispatchedMaxAgeMs: 4_000, triggerRequestTtlMs: 1_000, retention };
      expect(resolveCycliumOptions(short).retention).toEqual({
        archiveAfter: 4_000,
        deleteAfter: null,
        batchSize: 1_000,
        intervalMs: 60_000,
      });
      expect(resolveCycliumOptions({ retention: false }).retention).toBeNull();
      for (const [retention, field] of [
        [{ batchSize: 0 }, 'retention.batchSize'],
        [{ deleteAfter: -1 }, 'retention.deleteAfter'],
        [{ intervalMs: 1.5 }, 'retention.intervalMs'],
        [{ archiveAfter: 'week' }, 'retention.archiveAfter'],
        [{ keepFor: 1 }, 'retention.keepFor'],
        ['forever', 'retention'],
      ] as const) {
        expect(() => resolveCycliumOptions({ retention } as never)).toThrow(field);
      }
    },
  );

  it(
    'keeps recovery defaults a partial recovery object leaves out, and null intervalMs means ' +
      'boot only',
    () => {
      const resolved = resolveCycliumOptions({ recovery: { settleMs: 0, intervalMs: null } });
      expect(resolved.recovery).toEqual({
        onBoot: true,
        settleMs: 0,
        staleAfterMs: 120_000,
        intervalMs: null,
        notHostedGraceMs: 3_600_000,
      });
      expect(
        resolveCycliumOptions({ recovery: { notHostedGraceMs: null } }).recovery.notHostedGraceMs,
      ).toBeNull();
    },
  );

  it(
    'defaults the trigger poller to its own env, unless told otherwise (null = the default ' +
      'env)',
    () => {
      expect(resolveCycliumOptions({ env: 'rc' }).triggerPollSourceEnv).toBe('rc');
      expect(
        resolveCycliumOptions({ env: 'rc', triggerPollSourceEnv: null }).triggerPollSourceEnv,
      ).toBeNull();
      expect(
        resolveCycliumOptions({ env: 'rc', triggerPollSourceEnv: 'demo' }).triggerPollSourceEnv,
      ).toBe('demo');
    },
  );

  it('takes a listenUrl for the postgres bus, and unnamed statements', () => {
    const resolved = resolveCycliumOptions({
      listenUrl: 'postgresql://app@db-primary/app',
      preparedStatements: false,
    });
    expect(resolved).toMatchObject({
      listenUrl: 'postgresql://app@db-primary/app',
      preparedStatements: false,
    });
    expect(problems({ listenUrl: 'postgres://db/app', bus: 'postgres' })).toEqual([]);
  });

  it('takes windows past 24.8 days (32-bit milliseconds): they are 64-bit throughout', () => {
    const resolved = resolveCycliumOptions({
      busUndispatchedMaxAgeMs: 30 * DAY,
      recovery: { staleAfterMs: 40 * DAY },
    });
    expect(resolved.busUndispatchedMaxAgeMs).toBe(30 * DAY);
    expect(resolved.retention?.archiveAfter).toBe(30 * DAY);
    expect(resolved.recovery.staleAfterMs).toBe(40 * DAY);
  });

  it('accepts custom adapters and buses by shape', () => {
    const adapter = {
      acquire() {},
      renew() {},
      complete() {},
      fail() {},
      owns() {},
      reclaimExpired() {},
    };
    const bus = { publish() {}, subscribe() {} };
    expect(problems({ workClaims: adapter, bus })).toEqual([]);
    expect(problems({ workClaims: { acquire() {} } })[0]).toMatch(/^workClaims must be one of/);
    expect(problems({ bus: 'redis' })[0]).toMatch(/^bus must be one of: 'postgres', 'local'/);
  });

  it.each([
    [
      { nodeIdentity: '' },
      'nodeIdentity must be a non-empty string or a function returning one (got "")',
    ],
    [
      { workClaimsLeaseSeconds: 0 },
      'workClaimsLeaseSeconds must be a number of seconds > 0 (got 0)',
    ],
    [
      { workClaimsLeaseSeconds: '30' },
      'workClaimsLeaseSeconds must be a number of seconds > 0 (got "30")',
    ],
    [{ mode: 'fast' }, 'mode must be one of: full, trigger_only, disabled (got "fast")'],
    [{ stackSlug: 7 }, 'stackSlug must be a string or null (got 7)'],
    [{ jitterMs: -1 }, 'jitterMs must be a whole number of milliseconds >= 0 (got -1)'],
    [{ recovery: { onBoot: 'yes' } }, 'recovery.onBoot must be true or false (got "yes")'],
    [
      { recovery: { intervalMs: 0 } },
      'recovery.intervalMs must be a whole number of milliseconds >= 1, or null for boot only ' +
        '(got 0)',
    ],
    [
      { recovery: { notHostedGraceMs: 1.5 } },
      'recovery.notHostedGraceMs must be a whole number of milliseconds >= 1, or null to never ' +
        'fail them (got 1.5)',
    ],
    [
      { recovery: { resolvePolicy: 'restart' } },
      `recovery.resolvePolicy must be a function returning 'restart' or 'fail' (got "restart")`,
    ],
    [
      { triggerRequestTtlMs: 0 },
      'triggerRequestTtlMs must be a whole number of milliseconds >= 1 (got 0)',
    ],
    [{ busPollIntervalMs: 2 ** 31 }, `busPollIntervalMs must be at most ${TIMER} (got 2147483648)`],
    [
      { retention: { intervalMs: 30 * DAY } },
      `retention.intervalMs must be at most ${TIMER} (got 2592000000)`,
    ],
    [
      { busUndispatchedMaxAgeMs: 4e12 },
      `busUndispatchedMaxAgeMs must be at most ${WINDOW} (got 4000000000000)`,
    ],
    [
      { workClaimsLeaseSeconds: 3e6 },
      `workClaimsLeaseSeconds must be at most ${LEASE} (got 3000000)`,
    ],
    [
      { busPublishQueueMax: 0 },
      'busPublishQueueMax must be a whole number of publishes >= 1 (got 0)',
    ],
    [
      { busPublishQueueMax: 2.5 },
      'busPublishQueueMax must be a whole number of publishes >= 1 (got 2.5)',
    ],
    [{ busMaxPayloadBytes: 0 }, `${PAYLOAD} (got 0)`],
    [{ busMaxPayloadBytes: 200 * 1_048_576 }, `${PAYLOAD} (got 209715200)`],
    [{ busMaxPayloadBytes: 2_097_153 }, `${PAYLOAD} (got 2097153)`],
    [
      { checkoutTimeoutMs: 0 },
      'checkoutTimeoutMs must be a whole number of milliseconds >= 1 (got 0)',
    ],
    [
      { queryTimeoutMs: 1.5 },
      'queryTimeoutMs must be a whole number of milliseconds >= 1 (got 1.5)',
    ],
    [{ startupWaitMs: -1 }, 'startupWaitMs must be a whole number of milliseconds >= 0 (got -1)'],
    [
      { startupWaitMs: '2m' },
      'startupWaitMs must be a whole number of milliseconds >= 0 (got "2m")',
    ],
    [
      { deliveryTimeoutMs: 0 },
      'deliveryTimeoutMs must be a whole number of milliseconds >= 1 (got 0)',
    ],
    [{ outputMaxAttempts: 1.5 }, 'outputMaxAttempts must be a whole number >= 1 (got 1.5)'],
    [{ outputMaxAttempts: 0 }, 'outputMaxAttempts must be a whole number >= 1 (got 0)'],
    [
      { outputRetryBaseMs: '5s' },
      'outputRetryBaseMs must be a whole number of milliseconds >= 1 (got "5s")',
    ],
    [
      { listenUrl: 'db-primary:5432' },
      `listenUrl must be a postgres:// or postgresql:// connection URL, with bus: 'postgres' ` +
        `(got "db-primary:5432")`,
    ],
    [
      { listenUrl: 'postgres://app:s3cret@db/app', bus: 'local' },
      `listenUrl must be a postgres:// or postgresql:// connection URL, with bus: 'postgres' ` +
        `(got "postgres://app:***@db/app")`,
    ],
    [{ preparedStatements: 'false' }, 'preparedStatements must be true or false (got "false")'],
    [{ leaseSeconds: 5 }, 'leaseSeconds is not a CycliumModule option'],
    [
      { integrity: { keyId: 'k2', keys: { k1: 'x'.repeat(32) } } },
      'integrity.keyId must name one of integrity.keys (got an object)',
    ],
    [
      { integrity: { keyId: 'k1', keys: { k1: 'short' } } },
      'integrity.keys.k1 must be a string of at least 32 characters (got an object)',
    ],
    [
      { integrity: { keyId: 'k1', keys: {} } },
      'integrity.keys must be an object of secrets by key id, with at least one key (got an ' +
        'object)',
    ],
    [
      { integrity: { keyId: 'a:b', keys: { 'a:b': 'x'.repeat(32) } } },
      `integrity.keys: a key id must be non-empty and hold no ':' (got "a:b") (got an object)`,
    ],
    [
      { integrity: { keyId: 'k1', keys: { k1: 'x'.repeat(32) }, algorithm: 'md5' } },
      'integrity.algorithm is not an integrity option (keyId, keys) (got an object)',
    ],
  ])('rejects %j', (options, message) => {
    expect(problems(options)).toEqual([message]);
  });

  it('takes an integrity key set, copied', () => {
    const keys = { k1: 'x'.repeat(32), k0: 'y'.repeat(40) };
    const resolved = resolveCycliumOptions({ integrity: { keyId: 'k1', keys } });
    expect(resolved.integrity).toEqual({ keyId: 'k1', keys });
    keys.k1 = 'changed';
    expect(resolved.integrity?.keys.k1).toBe('x'.repeat(32));
  });

  it('rejects a non-object', () => {
    expect(problems('full')).toEqual(['options must be an object (got "full")']);
  });
});
