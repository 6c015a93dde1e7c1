import { Injectable } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { decoratedMethods } from '../discovery/decorated-methods.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { validateActor, validateExpectation } from './actor-definition.validator.js';
import { Actor, type ActorOptions } from './actor.decorator.js';
import { Expectation } from './expectation.decorator.js';
import type { RegisteredActor } from './registered-actor.js';

/**
 * Finds every `@Actor` provider and its `@Expectation` methods, validated, each method bound to its
 * instance. Two actors with one id, or two expectations with one id on an actor, fail here,
 * naming both classes or methods.
 */
@Injectable()
export class ActorExplorer {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
  ) {}

  explore(): RegisteredActor[] {
    const found: RegisteredActor[] = [];
    const owners = new Map<string, string>();
    for (const wrapper of this.discovery.getProviders({ metadataKey: Actor.KEY })) {
      const options = this.discovery.getMetadataByDecorator(Actor, wrapper) as ActorOptions;
      const className = wrapper.metatype?.name ?? String(wrapper.token);
      if (!wrapper.isDependencyTreeStatic()) {
        throw new ActorDefinitionError(
          `@Actor ${className} is request-scoped (or depends on a request-scoped provider); ` +
            `actors must be singletons`,
        );
      }
      const actor = validateActor(className, options);
      const previous = owners.get(actor.id);
      if (previous)
        throw new ActorDefinitionError(
          `duplicate actor id "${actor.id}" on ${previous} and ${className}`,
        );
      owners.set(actor.id, className);

      for (const { methodName, options: expectationOptions, call } of decoratedMethods(
        this.scanner,
        this.reflector,
        Expectation,
        wrapper.instance as object,
      )) {
        const expectation = validateExpectation(
          actor.id,
          className,
          methodName,
          expectationOptions,
        );
        if (actor.expectations.has(expectation.id)) {
          throw new ActorDefinitionError(
            `duplicate expectation id "${expectation.id}" on ${className}.${methodName} (already ` +
              `on ${className}.${actor.expectations.get(expectation.id)?.methodName})`,
          );
        }
        expectation.handler = call;
        actor.expectations.set(expectation.id, expectation);
      }
      found.push(actor);
    }
    return found;
  }
}
