import { Injectable } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, Reflector } from '@nestjs/core';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { decoratedMethods } from '../discovery/decorated-methods.js';
import type { RegisteredWorkflow } from './registered-workflow.js';
import { checkGraph, validateStep, validateWorkflow } from './workflow-definition.validator.js';
import { WorkflowDefinitionError } from './workflow-definition.error.js';
import { Workflow, WorkflowStep, type WorkflowOptions } from './workflow.decorator.js';

/**
 * Finds every `@Workflow` provider and its `@WorkflowStep` methods and checks the graph: each step
 * names an expectation the app declares, depends only on steps of its workflow, and no dependency
 * loops back. Anything wrong fails boot here, naming the class and step.
 */
@Injectable()
export class WorkflowExplorer {
  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly actors: ActorRegistry,
  ) {}

  explore(): RegisteredWorkflow[] {
    const found = new Map<string, RegisteredWorkflow>();
    for (const wrapper of this.discovery.getProviders({ metadataKey: Workflow.KEY })) {
      const options = this.discovery.getMetadataByDecorator(Workflow, wrapper) as
        WorkflowOptions | undefined;
      const className = wrapper.metatype?.name ?? String(wrapper.token);
      if (!wrapper.isDependencyTreeStatic()) {
        throw new WorkflowDefinitionError(
          `@Workflow ${className} is request-scoped (or depends on a request-scoped provider); ` +
            `workflows must be singletons`,
        );
      }
      const workflow = validateWorkflow(className, options);
      const previous = found.get(workflow.id);
      if (previous)
        throw new WorkflowDefinitionError(
          `duplicate workflow id "${workflow.id}" on ${previous.className} and ${className}`,
        );

      for (const { methodName, options: stepOptions, call } of decoratedMethods(
        this.scanner,
        this.reflector,
        WorkflowStep,
        wrapper.instance as object,
      )) {
        const step = validateStep(this.actors, className, methodName, stepOptions);
        const existing = workflow.steps.get(step.id);
        if (existing)
          throw new WorkflowDefinitionError(
            `@WorkflowStep on ${className}.${methodName}: duplicate step id "${step.id}" ` +
              `(already on ${className}.${existing.methodName})`,
          );
        step.buildInput = call;
        workflow.steps.set(step.id, step);
      }
      checkGraph(workflow);
      found.set(workflow.id, workflow);
    }
    return [...found.values()];
  }
}
