/**
 * An actor id this node does not host, where a call needs one it does (`Mode.setActorOverride`).
 */
export class UnknownActorError extends Error {
  override readonly name = 'UnknownActorError';

  constructor(
    readonly actorId: string,
    where: string,
    hosted: readonly string[],
  ) {
    super(
      `${where}: no actor ${JSON.stringify(actorId)} is hosted on this node (hosted: ` +
        `${hosted.length > 0 ? hosted.join(', ') : 'none'})`,
    );
  }
}
