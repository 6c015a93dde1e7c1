import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type {
  RecoveryPolicy,
  ResolvedCycliumOptions,
} from '../options/cyclium-options.interface.js';
import { recordedPolicyOf } from '../episodes/episode-recovery-store.js';
import type { RegisteredActor } from './registered-actor.js';

/**
 * What each hosted expectation's recovery policy is, per actor, stack and env, so recovery can
 * read it when the actor's code is not at hand (another stack, say). A node writes its own scope's
 * row only: an `rc` node, or another stack, never overwrites what the others read.
 */
@Injectable()
export class ActorDefinitionsStore {
  constructor(
    private readonly database: CycliumDataSource,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * At boot: a database away meanwhile is waited for (CycliumDataSource.atBoot); the upsert is
   * idempotent.
   */
  async record(actors: Iterable<RegisteredActor>): Promise<void> {
    await this.database.atBoot('recording the actor definitions', () => this.upsert(actors));
  }

  private async upsert(actors: Iterable<RegisteredActor>): Promise<void> {
    for (const actor of actors) {
      const expectations = [...actor.expectations.values()].map((e) => ({
        id: e.id,
        recovery_policy: e.options.recoveryPolicy ?? 'fail',
        max_attempts: e.options.maxAttempts ?? 3,
      }));
      await this.database.sql.query(
        `INSERT INTO cyclium_actor_scopes (actor_id, source_stack, source_env, expectations)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (actor_id, coalesce(source_env, ''), coalesce(source_stack, ''))
         DO UPDATE SET expectations = EXCLUDED.expectations, updated_at = now()`,
        [actor.id, this.options.stackSlug, this.options.env, JSON.stringify(expectations)],
      );
    }
  }

  /**
   * The recovery policy recorded for an episode's expectation in the episode's stack and env (see
   * recordedPolicyOf).
   */
  async recordedPolicy(episode: {
    actorId: string;
    expectationId: string;
    sourceStack: string | null;
    sourceEnv: string | null;
  }): Promise<RecoveryPolicy | null> {
    const { rows } = await this.database.sql.query<{ policy: string | null }>(
      `SELECT ${recordedPolicyOf('e')} AS policy
         FROM (SELECT $1::text AS actor_id, $2::text AS expectation_id, $3::text AS source_stack,
               $4::text AS source_env) e`,
      [episode.actorId, episode.expectationId, episode.sourceStack, episode.sourceEnv],
    );
    const policy = rows[0]?.policy;
    return policy === 'restart' || policy === 'fail' ? policy : null;
  }
}
