import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { EpisodeVersionMoves } from '../episodes/episode-version-moves.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { versionProblem } from '../versions/expectation-version.js';
import { goneAfterMs } from '../options/node-liveness.js';

/** `Episodes.moveVersion`'s request: the episodes of one expectation pinned to `from`. */
export interface MoveVersion {
  actorId: string;
  expectationId: string;
  from: string;
  to: string;
}

/**
 * `moved`: how many episodes now carry `to` (and which); `not_accepted`: this node's code for the
 * expectation is not at `to` or does not list `from` in `accepts`, and nothing moved.
 */
export type MoveVersionResult =
  | { status: 'moved'; moved: number; episodeIds: string[] }
  | { status: 'not_accepted'; reason: string };

/**
 * A `moveVersion` request the caller got wrong (a 400 over HTTP): `field` names what to fix.
 */
export class InvalidVersionMoveError extends TypeError {
  override readonly name = 'InvalidVersionMoveError';

  constructor(
    readonly field: keyof MoveVersion,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Moves the episodes pinned to one version of an expectation to another, when the host says the
 * new code can take them: this node runs the expectation at `to` and its `accepts` lists `from`.
 * Nodes of `to` then resume them (with or without `accepts`), and `from` can be retired: no
 * episode needs a node of it any more.
 */
@Injectable()
export class VersionMoves {
  private readonly logger = new Logger('CycliumVersions');

  constructor(
    private readonly registry: ActorRegistry,
    private readonly moves: EpisodeVersionMoves,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  async move(request: MoveVersion): Promise<MoveVersionResult> {
    for (const field of ['actorId', 'expectationId'] as const)
      if (typeof request?.[field] !== 'string' || request[field] === '')
        throw new InvalidVersionMoveError(field, `${field} must be a non-empty string`);
    for (const field of ['from', 'to'] as const) {
      const problem = versionProblem({ version: request[field] });
      if (problem) throw new InvalidVersionMoveError(field, problem.replace('version', field));
    }
    const { actorId, expectationId, from, to } = request;
    if (from === to) throw new InvalidVersionMoveError('to', 'to must differ from from');
    const code = this.registry.expectation(actorId, expectationId)?.options;
    if (!code)
      return {
        status: 'not_accepted',
        reason: `this node does not host ${actorId}.${expectationId}`,
      };
    if (code.version !== to || !(code.accepts ?? []).includes(from))
      return {
        status: 'not_accepted',
        reason:
          `this node runs ${actorId}.${expectationId} at ${code.version ?? 'no version'}` +
          `${code.accepts?.length ? ` accepting ${code.accepts.join(', ')}` : ''}: moving ` +
          `episodes from ${from} to ${to} needs code at ${to} with accepts: ['${from}']`,
      };
    const episodeIds = await this.moves.move({
      ...request,
      stack: this.options.stackSlug,
      env: this.options.env,
      goneAfterMs: goneAfterMs(this.options),
      node: this.identity.name(),
    });
    this.logger.log(
      `moved ${episodeIds.length} episode(s) of ${actorId}.${expectationId} from version ` +
        `${from} to ${to}`,
    );
    return { status: 'moved', moved: episodeIds.length, episodeIds };
  }
}
