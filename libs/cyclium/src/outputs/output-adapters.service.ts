import { Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import { OutputAdapter } from './output-adapter.decorator.js';
import type { OutputDeliverer } from './output-adapter.interface.js';

/**
 * The `@OutputAdapter(type)` providers of this node: the output types it can deliver, and so take.
 */
@Injectable()
export class OutputAdapters implements OnModuleInit {
  private readonly adapters = new Map<string, OutputDeliverer>();

  constructor(private readonly discovery: DiscoveryService) {}

  onModuleInit(): void {
    for (const wrapper of this.discovery.getProviders({ metadataKey: OutputAdapter.KEY })) {
      const type = this.discovery.getMetadataByDecorator(OutputAdapter, wrapper) as string;
      const name = wrapper.metatype?.name ?? String(wrapper.token);
      const instance = wrapper.instance as Partial<OutputDeliverer> | undefined;
      if (typeof instance?.deliver !== 'function') {
        throw new ActorDefinitionError(
          `@OutputAdapter('${type}') on ${name}: the class must implement deliver(output, context)`,
        );
      }
      if (this.adapters.has(type))
        throw new ActorDefinitionError(`two @OutputAdapter('${type}') providers (second: ${name})`);
      this.adapters.set(type, instance as OutputDeliverer);
    }
  }

  get(type: string): OutputDeliverer | undefined {
    return this.adapters.get(type);
  }

  /** The types hosted here, sorted (they are a statement parameter). */
  types(): string[] {
    return [...this.adapters.keys()].sort();
  }
}
