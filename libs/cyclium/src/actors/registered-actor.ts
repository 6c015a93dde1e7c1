import type { ActorOptions } from './actor.decorator.js';
import type { ExpectationOptions } from './expectation.decorator.js';

export interface RegisteredExpectation {
  id: string;
  actorId: string;
  className: string;
  methodName: string;
  options: ExpectationOptions;
  /** For `{ every }` triggers. */
  intervalMs: number | null;
  handler: (context: unknown) => Promise<unknown>;
}

export interface RegisteredActor {
  id: string;
  className: string;
  options: Required<Omit<ActorOptions, 'stacks'>> & Pick<ActorOptions, 'stacks'>;
  expectations: Map<string, RegisteredExpectation>;
}
