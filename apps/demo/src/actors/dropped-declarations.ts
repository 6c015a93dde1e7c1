/**
 * What this node leaves out of the app, as an older or newer release of it would during a rolling
 * deploy (read when the classes load):
 *
 *   DEMO_DROP_ACTORS        actor ids, comma-separated: those actors are not hosted here at all
 *   DEMO_DROP_EXPECTATIONS  `actor.expectation`, comma-separated: the actor is hosted without them
 */
function listed(value: string | undefined): ReadonlySet<string> {
  return new Set(
    (value ?? '')
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean),
  );
}

const droppedActors = listed(process.env.DEMO_DROP_ACTORS);
const droppedExpectations = listed(process.env.DEMO_DROP_EXPECTATIONS);

/** Whether DEMO_DROP_ACTORS leaves `actorId` out of this node. */
export function actorDropped(actorId: string): boolean {
  return droppedActors.has(actorId);
}

/** `decorator` (an `@Expectation`), or nothing when DEMO_DROP_EXPECTATIONS leaves it out of this node. */
export function unlessDropped(
  actorId: string,
  expectationId: string,
  decorator: MethodDecorator,
): MethodDecorator {
  return droppedExpectations.has(`${actorId}.${expectationId}`) ? () => undefined : decorator;
}
