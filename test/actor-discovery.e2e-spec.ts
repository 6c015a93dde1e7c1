import { afterAll, describe, expect, it } from '@jest/globals';
import { Injectable, Scope, type INestApplicationContext, type Provider } from '@nestjs/common';
import { Actor, Episodes, Expectation, type EpisodeContext, type Trigger } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';

@Injectable()
@Actor({ id: 'twin' })
class TwinOne {
  @Expectation({ trigger: 'manual' })
  async go(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'twin' })
class TwinTwo {
  @Expectation({ trigger: 'manual' })
  async go(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'dup_exp' })
class DuplicateExpectation {
  @Expectation({ id: 'same', trigger: 'manual' })
  async first(): Promise<void> {}

  @Expectation({ id: 'same', trigger: 'manual' })
  async second(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'bad_cron' })
class BadCron {
  @Expectation({ trigger: { cron: 'every tuesday' } })
  async weekly(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'bad_interval' })
class BadInterval {
  @Expectation({ trigger: { every: '5 fortnights' } })
  async often(): Promise<void> {}
}

// A cast, as plain JavaScript would do without one: the types forbid mixing trigger kinds.
@Injectable()
@Actor({ id: 'mixed_trigger' })
class MixedTrigger {
  @Expectation({ trigger: { event: 'resource.updated', cron: '* * * * *' } as unknown as Trigger })
  async both(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'bad_delay' })
class BadDelay {
  @Expectation({ trigger: 'manual', delayMs: -5 })
  async later(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'bad_retry' })
class BadRetry {
  @Expectation({ trigger: 'manual', retry: { attempts: 3, backoff: { factor: 0.5 } } })
  async flaky(): Promise<void> {}
}

@Injectable({ scope: Scope.REQUEST })
@Actor({ id: 'per_request' })
class PerRequest {
  @Expectation({ trigger: 'manual' })
  async go(): Promise<void> {}
}

@Injectable()
@Actor({ id: 'stack_b_only', stacks: ['stack_b'] })
class StackBOnly {
  @Expectation({ trigger: 'manual', recoveryPolicy: 'restart', maxAttempts: 5 })
  async go(ep: EpisodeContext): Promise<void> {
    await ep.step('noop', () => null);
  }
}

describe('actor discovery at boot', () => {
  const database = useDatabase();
  const apps: INestApplicationContext[] = [];

  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
  });

  const boot = (providers: Provider[], stackSlug?: string) =>
    startCycliumApp({
      url: database.url,
      cyclium: { nodeIdentity: `n-${apps.length}`, stackSlug },
      providers,
    }).then((app) => {
      apps.push(app);
      return app;
    });

  it.each([
    [[TwinOne, TwinTwo], 'duplicate actor id "twin" on TwinOne and TwinTwo'],
    [
      [DuplicateExpectation],
      'duplicate expectation id "same" on DuplicateExpectation.second (already on DuplicateExpectation.first)',
    ],
    [[BadCron], '@Expectation on BadCron.weekly: cannot parse cron "every tuesday"'],
    [[BadInterval], `@Expectation on BadInterval.often: cannot parse interval "5 fortnights"`],
    [
      [MixedTrigger],
      '@Expectation on MixedTrigger.both: trigger must be exactly one of { event, filter? }, { every, catchUp? } or { cron, catchUp? }',
    ],
    [[PerRequest], '@Actor PerRequest is request-scoped'],
    [
      [BadDelay],
      '@Expectation on BadDelay.later: delayMs must be a whole number of milliseconds >= 0',
    ],
    [[BadRetry], '@Expectation on BadRetry.flaky: retry.backoff.factor must be a number >= 1'],
  ])('fails boot for %p, naming the class and method', async (providers, message) => {
    await expect(boot(providers as Provider[])).rejects.toThrow(message);
  });

  it('hosts an actor only on the stacks it lists, and records its definition for recovery', async () => {
    const elsewhere = await boot([StackBOnly], 'stack_a');
    await expect(elsewhere.get(Episodes).trigger('stack_b_only', 'go', {})).rejects.toThrow(
      'no actor stack_b_only',
    );

    const home = await boot([StackBOnly], 'stack_b');
    const result = await home.get(Episodes).trigger('stack_b_only', 'go', {});
    expect(result.status).toBe('started');
    const { rows } = await database.db.query(
      `SELECT expectations FROM cyclium_actor_scopes WHERE actor_id = 'stack_b_only' AND source_stack = 'stack_b'`,
    );
    expect(rows[0].expectations).toEqual([
      { id: 'go', recovery_policy: 'restart', max_attempts: 5 },
    ]);
  });
});
