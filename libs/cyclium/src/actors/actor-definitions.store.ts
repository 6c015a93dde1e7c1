import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { RecoveryPolicy } from '../options/cyclium-options.interface.js';
import type { RegisteredActor } from './registered-actor.js';

/**
 * Every statement on `cyclium_actor_definitions`: what each hosted expectation's recovery policy
 * is, so recovery can read it when the actor's code is not at hand (another stack, say).
 */
@Injectable()
export class ActorDefinitionsStore {
  constructor(private readonly database: CycliumDataSource) {}

  async record(actors: Iterable<RegisteredActor>): Promise<void> {
    for (const actor of actors) {
      const expectations = [...actor.expectations.values()].map((e) => ({
        id: e.id,
        recovery_policy: e.options.recoveryPolicy ?? 'fail',
        max_attempts: e.options.maxAttempts ?? 3,
      }));
      await this.database.sql.query(
        `INSERT INTO cyclium_actor_definitions (actor_id, expectations, enabled, updated_at)
         VALUES ($1, $2, true, now())
         ON CONFLICT (actor_id) DO UPDATE SET expectations = EXCLUDED.expectations, updated_at = now()`,
        [actor.id, JSON.stringify(expectations)],
      );
    }
  }

  /** The recovery policy recorded for an expectation by whichever node hosts its actor. */
  async recordedPolicy(actorId: string, expectationId: string): Promise<RecoveryPolicy | null> {
    const { rows } = await this.database.sql.query<{ policy: string | null }>(
      `SELECT x->>'recovery_policy' AS policy
         FROM cyclium_actor_definitions d, jsonb_array_elements(d.expectations) x
        WHERE d.actor_id = $1 AND x->>'id' = $2`,
      [actorId, expectationId],
    );
    const policy = rows[0]?.policy;
    return policy === 'restart' || policy === 'fail' ? policy : null;
  }
}
