import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { validateCronExpression } from 'cron';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { decoratedMethods } from '../discovery/decorated-methods.js';
import type { RecoveryPolicy, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { ActorDefinitionError } from './actor-definition.error.js';
import { Actor, type ActorOptions } from './actor.decorator.js';
import { Expectation, type ExpectationOptions } from './expectation.decorator.js';
import { parseInterval } from './interval.js';
import type { RegisteredActor, RegisteredExpectation } from './registered-actor.js';

const OVERFLOWS = ['queue', 'drop', 'shed_oldest'];

/**
 * Finds every `@Actor` provider and its `@Expectation` methods at boot, validates them, and keeps
 * the ones that run on this node's stack. Anything that could only fail later (a bad cron, two
 * actors with one id) fails boot here instead, naming the class and method.
 */
@Injectable()
export class ActorRegistry implements OnModuleInit {
  private readonly logger = new Logger(ActorRegistry.name);
  private readonly actors = new Map<string, RegisteredActor>();
  /** Every actor the app declares, this node's stack or not (workflows may name any of them). */
  private readonly declaredActors = new Map<string, RegisteredActor>();
  private discovered = false;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly database: CycliumDataSource,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async onModuleInit(): Promise<void> {
    this.discover();
    await this.recordDefinitions();
  }

  /** An expectation the app declares, whether or not its actor runs on this node's stack. */
  declared(actorId: string, expectationId: string): RegisteredExpectation | undefined {
    this.discover();
    return this.declaredActors.get(actorId)?.expectations.get(expectationId);
  }

  /** Whether the app declares the actor at all. */
  declares(actorId: string): boolean {
    this.discover();
    return this.declaredActors.has(actorId);
  }

  all(): RegisteredActor[] {
    return [...this.actors.values()];
  }

  get(actorId: string): RegisteredActor | undefined {
    return this.actors.get(actorId);
  }

  expectation(actorId: string, expectationId: string): RegisteredExpectation | undefined {
    return this.actors.get(actorId)?.expectations.get(expectationId);
  }

  /** Once, whoever asks first (the workflow registry may, before this provider's own init). */
  private discover(): void {
    if (this.discovered) return;
    this.discovered = true;
    const owners = new Map<string, string>();
    for (const wrapper of this.discovery.getProviders({ metadataKey: Actor.KEY })) {
      const options = this.discovery.getMetadataByDecorator(Actor, wrapper) as ActorOptions;
      const className = wrapper.metatype?.name ?? String(wrapper.token);
      if (!wrapper.isDependencyTreeStatic()) {
        throw new ActorDefinitionError(`@Actor ${className} is request-scoped (or depends on a request-scoped provider); actors must be singletons`);
      }
      const actor = this.validateActor(className, options);
      const previous = owners.get(actor.id);
      if (previous) throw new ActorDefinitionError(`duplicate actor id "${actor.id}" on ${previous} and ${className}`);
      owners.set(actor.id, className);

      for (const { methodName, options: expectationOptions, call } of decoratedMethods(this.scanner, this.reflector, Expectation, wrapper.instance as object)) {
        const expectation = this.validateExpectation(actor.id, className, methodName, expectationOptions);
        if (actor.expectations.has(expectation.id)) {
          throw new ActorDefinitionError(
            `duplicate expectation id "${expectation.id}" on ${className}.${methodName} (already on ${className}.${actor.expectations.get(expectation.id)?.methodName})`,
          );
        }
        expectation.handler = call;
        actor.expectations.set(expectation.id, expectation);
      }

      this.declaredActors.set(actor.id, actor);
      const stack = this.options.stackSlug;
      if (actor.options.stacks && !(stack !== null && actor.options.stacks.includes(stack))) {
        this.logger.log(`actor ${actor.id} skipped: runs on stacks ${actor.options.stacks.join(', ')}, this node is ${stack ?? 'unset'}`);
        continue;
      }
      this.actors.set(actor.id, actor);
    }
  }

  private validateActor(className: string, options: ActorOptions | undefined): RegisteredActor {
    const fail = (message: string): never => {
      throw new ActorDefinitionError(`@Actor on ${className}: ${message}`);
    };
    if (!options || typeof options.id !== 'string' || options.id.trim() === '') fail('id must be a non-empty string');
    const actorOptions = options as ActorOptions;
    const max = actorOptions.maxConcurrentEpisodes ?? 3;
    if (!Number.isInteger(max) || max < 1) fail(`maxConcurrentEpisodes must be a whole number >= 1 (got ${max})`);
    const overflow = actorOptions.overflow ?? 'queue';
    if (!OVERFLOWS.includes(overflow)) fail(`overflow must be one of: ${OVERFLOWS.join(', ')} (got ${String(overflow)})`);
    const maxQueued = actorOptions.maxQueued ?? max;
    if (!Number.isInteger(maxQueued) || maxQueued < 1) fail(`maxQueued must be a whole number >= 1 (got ${maxQueued})`);
    if (actorOptions.stacks !== undefined && !Array.isArray(actorOptions.stacks)) fail('stacks must be an array of stack slugs');
    return {
      id: actorOptions.id,
      className,
      options: { id: actorOptions.id, maxConcurrentEpisodes: max, overflow, maxQueued, stacks: actorOptions.stacks },
      expectations: new Map(),
    };
  }

  private validateExpectation(
    actorId: string,
    className: string,
    methodName: string,
    options: ExpectationOptions,
  ): RegisteredExpectation {
    const fail = (message: string): never => {
      throw new ActorDefinitionError(`@Expectation on ${className}.${methodName}: ${message}`);
    };
    const id = options.id ?? methodName;
    const trigger = options.trigger;
    if (trigger && typeof trigger === 'object') {
      // The types rule this out; plain JavaScript (or a cast) could still mix kinds, and one would be silently dropped.
      const kinds = ['event', 'every', 'cron'].filter((k) => k in trigger);
      const unknown = Object.keys(trigger).filter((k) => !['event', 'every', 'cron', 'filter'].includes(k));
      if (kinds.length !== 1 || unknown.length > 0 || ('filter' in trigger && !('event' in trigger))) {
        fail(`trigger must be exactly one of { event, filter? }, { every } or { cron } (got ${JSON.stringify(trigger)})`);
      }
    }
    let intervalMs: number | null = null;
    if (trigger === 'manual' || trigger === 'workflow') {
      // nothing to parse
    } else if (trigger && typeof trigger === 'object' && trigger.every !== undefined) {
      intervalMs = parseInterval(trigger.every);
      if (intervalMs === null) fail(`cannot parse interval ${JSON.stringify(trigger.every)} (use '30s', '5m', '1h', '1d' or milliseconds)`);
    } else if (trigger && typeof trigger === 'object' && trigger.cron !== undefined) {
      const { valid, error } = validateCronExpression(trigger.cron);
      if (!valid) fail(`cannot parse cron ${JSON.stringify(trigger.cron)}: ${error?.message ?? 'invalid'}`);
    } else if (!(trigger && typeof trigger === 'object' && typeof trigger.event === 'string')) {
      fail(`trigger must be { event }, { every }, { cron }, 'manual' or 'workflow' (got ${JSON.stringify(trigger)})`);
    }
    for (const field of ['debounceMs', 'cooldownMs'] as const) {
      const value = options[field];
      if (value !== undefined && !(Number.isInteger(value) && value >= 0)) fail(`${field} must be a whole number of milliseconds >= 0`);
    }
    if (options.maxAttempts !== undefined && !(Number.isInteger(options.maxAttempts) && options.maxAttempts >= 1)) {
      fail('maxAttempts must be a whole number >= 1');
    }
    if (options.recoveryPolicy !== undefined && !['restart', 'fail'].includes(options.recoveryPolicy)) {
      fail(`recoveryPolicy must be 'restart' or 'fail'`);
    }
    return { id, actorId, className, methodName, options, intervalMs, handler: async () => undefined };
  }

  /** The recovery policy recorded for an expectation by whichever node hosts its actor (for one hosted elsewhere). */
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

  /** Recovery reads policies from here when the actor's code is not at hand (another stack, say). */
  private async recordDefinitions(): Promise<void> {
    for (const actor of this.actors.values()) {
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
}
