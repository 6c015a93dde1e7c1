/**
 * An actor or expectation that cannot run as declared; thrown at boot, naming the class and method.
 */
export class ActorDefinitionError extends Error {
  override readonly name = 'ActorDefinitionError';
}
