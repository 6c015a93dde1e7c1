import { Injectable, type OnModuleInit } from '@nestjs/common';
import { Bus } from '@cyclium/nestjs';
import { TERMINAL_EVENTS } from './node-protocol.js';

/**
 * Reads every terminal lifecycle event on its node, subscribed in onModuleInit as a host's watcher
 * is, so the node declares those types when it registers: every end of its stack and env must then
 * write its event (the checker's lifecycle rule).
 */
@Injectable()
export class LifecycleWatcher implements OnModuleInit {
  constructor(private readonly bus: Bus) {}

  onModuleInit(): void {
    for (const type of new Set(Object.values(TERMINAL_EVENTS))) {
      this.bus.subscribe(type, () => undefined);
    }
  }
}
