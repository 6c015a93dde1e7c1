import { describe, expect, it } from '@jest/globals';
import { ActorDefinitionsStore } from '../libs/cyclium/src/actors/actor-definitions.store.js';
import type { RegisteredActor } from '../libs/cyclium/src/actors/registered-actor.js';
import type { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import type { RecoveryPolicy } from '../libs/cyclium/src/options/cyclium-options.interface.js';
import { resolveCycliumOptions } from '../libs/cyclium/src/options/resolve-options.js';
import { useDatabase } from './support/database.js';

/** The actor `report` with one expectation `run` of the given policy, as a node's registry holds it. */
function report(recoveryPolicy: RecoveryPolicy): RegisteredActor {
  const expectation = {
    id: 'run',
    actorId: 'report',
    className: 'R',
    methodName: 'run',
    options: { recoveryPolicy },
    intervalMs: null,
    handler: async () => null,
  };
  return {
    id: 'report',
    className: 'R',
    options: { id: 'report', maxConcurrentEpisodes: 1, overflow: 'reject', maxQueued: 0 },
    expectations: new Map([['run', expectation]]),
  } as unknown as RegisteredActor;
}

/**
 * Recovery reads an actor's recorded policy in the episode's own stack and env: a node of another
 * env or stack (an `rc` node, a release mid-deploy) records its own row and overwrites nobody's.
 */
describe('actor definitions are recorded per actor, stack and env', () => {
  const database = useDatabase();
  const store = (stackSlug: string | null, env: string | null) =>
    new ActorDefinitionsStore(
      {
        sql: database.db,
        atBoot: <T>(_what: string, work: () => Promise<T>) => work(),
      } as unknown as CycliumDataSource,
      resolveCycliumOptions({ stackSlug, env }),
    );
  const policyOf = (sourceStack: string | null, sourceEnv: string | null) =>
    store(null, null).recordedPolicy({
      actorId: 'report',
      expectationId: 'run',
      sourceStack,
      sourceEnv,
    });

  it("an rc node's record leaves the default env's policy as it was, and each scope reads its own", async () => {
    await store(null, null).record([report('restart')]);
    await store(null, 'rc').record([report('fail')]);
    await store('stack_b', null).record([report('fail')]);
    await store(null, 'rc').record([report('fail')]);

    expect(await policyOf(null, null)).toBe('restart');
    expect(await policyOf(null, 'rc')).toBe('fail');
    expect(await policyOf('stack_b', null)).toBe('fail');
    // A stack with no row of its own reads another stack's in its env; an env with none reads nothing.
    expect(await policyOf('stack_c', 'rc')).toBe('fail');
    expect(await policyOf(null, 'qa')).toBeNull();
    const { rows } = await database.db.query(
      `SELECT count(*)::int AS n FROM cyclium_actor_scopes WHERE actor_id = 'report'`,
    );
    expect(rows[0].n).toBe(3);
  });

  it("falls back to a previous release's row, keyed by actor alone, only where its scope has none", async () => {
    await database.db.query(
      `INSERT INTO cyclium_actor_definitions (actor_id, expectations) VALUES ('report', '[{"id": "run", "recovery_policy": "restart"}]')`,
    );
    expect(await policyOf(null, 'qa')).toBe('restart');
    expect(await policyOf(null, 'rc')).toBe('fail');
  });
});
