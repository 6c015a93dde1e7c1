import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { ActorDefinitionsStore } from './actor-definitions.store.js';
import { ActorExplorer } from './actor.explorer.js';
import type { RegisteredActor, RegisteredExpectation } from './registered-actor.js';
import type { HostedExpectations } from '../sql/hosted-expectations.js';
import { hostedEntries } from '../versions/expectation-version.js';

/**
 * Holds the actors the app declares (found and validated at boot by ActorExplorer, so a bad
 * definition fails boot, not a later trigger) and the ones that run on this node's stack, and
 * records their recovery policies for nodes that do not host them.
 */
@Injectable()
export class ActorRegistry implements OnModuleInit {
  private readonly logger = new Logger('CycliumActors');
  private readonly actors = new Map<string, RegisteredActor>();
  /** Every actor the app declares, this node's stack or not (workflows may name any of them). */
  private readonly declaredActors = new Map<string, RegisteredActor>();
  private discovered = false;

  constructor(
    private readonly explorer: ActorExplorer,
    private readonly definitions: ActorDefinitionsStore,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async onModuleInit(): Promise<void> {
    this.discover();
    await this.definitions.record(this.actors.values());
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

  /**
   * The expectations of `actors` (by default every actor this node hosts), by actor: see
   * HostedExpectations.
   */
  hostedExpectations(actors: readonly RegisteredActor[] = this.all()): HostedExpectations {
    return Object.fromEntries(
      actors.map((actor) => [
        actor.id,
        [...actor.expectations.values()].flatMap((e) => hostedEntries(e.id, e.options)),
      ]),
    );
  }

  /** Once, whoever asks first (the workflow registry may, before this provider's own init). */
  private discover(): void {
    if (this.discovered) return;
    this.discovered = true;
    const stack = this.options.stackSlug;
    for (const actor of this.explorer.explore()) {
      this.declaredActors.set(actor.id, actor);
      if (actor.options.stacks && !(stack !== null && actor.options.stacks.includes(stack))) {
        this.logger.log(
          `actor ${actor.id} skipped: runs on stacks ${actor.options.stacks.join(', ')}, this ` +
            `node is ${stack ?? 'unset'}`,
        );
        continue;
      }
      this.actors.set(actor.id, actor);
    }
  }
}
