import { EpisodeSleeping } from './episode-errors.js';

/**
 * This node's code cannot run the episode, another node's can: its journal passed a patch this code
 * does not have, or it started on a version this code neither is nor accepts. The run stops before
 * anything of it is written and the episode waits (`waiting`, no attempt counted) for a wake-up
 * after `delayMs`, which a node running its version takes (a patch is not known to the database:
 * any node may take that one, and code without the patch hands it back again). Not a failure; a
 * host's catch cannot keep it.
 */
export class EpisodeHandedBack extends EpisodeSleeping {
  override readonly name: string = 'EpisodeHandedBack';
  constructor(
    /** What this code lacks: `patch <id>` or `version <v>`. */
    readonly needs: string,
    delayMs: number,
  ) {
    super(`needs ${needs}`, delayMs);
    this.message = `handed back: the episode needs ${needs}, which this node's code lacks`;
  }
}

/**
 * `ep.deprecatePatch(id)` met an episode whose journal passed that point before the patch existed:
 * it needs the old branch, which this code removed. The episode fails (`patch_deprecated`, never
 * retried by its policy); an operator's retry on a node whose code still has `ep.patched(id)`
 * resumes it there.
 */
export class PatchDeprecatedError extends Error {
  override readonly name = 'PatchDeprecatedError';
  constructor(
    readonly patchId: string,
    readonly stepNo: number,
    recorded: string,
  ) {
    super(
      `patch "${patchId}" is deprecated in this code (ep.deprecatePatch), but this episode ` +
        `passed that point before the patch existed (step ${stepNo} was recorded as ` +
        `"${recorded}"): it needs the old branch; retry it on a node whose code still has ` +
        `ep.patched("${patchId}")`,
    );
  }
}
