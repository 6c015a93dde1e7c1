import type { Checkpoint } from './episode-journal.js';
import { EpisodeHandedBack, PatchDeprecatedError } from './patch-errors.js';

/** The name of a patch's marker step: `patch:<id>`. */
export const PATCH_PREFIX = 'patch:';

/**
 * How long an episode handed back for a patch waits before any node takes it again: nothing in the
 * database says which nodes have a patch, so this bounds how often code without it meets it while
 * a deploy rolls.
 */
export const PATCH_HAND_BACK_MS = 10_000;

/**
 * What `ep.patched(id)` (or `deprecatePatch`, `deprecated`) decides at step position `stepNo`, from
 * what the journal recorded there: `marker` (the marker of this patch: take the new branch, the
 * position is the marker's), `fresh` (nothing recorded yet: take it and journal the marker there)
 * or `old` (the episode passed this point before the patch: the old branch, the position stays
 * free for the step recorded there). The deprecated form refuses `old`.
 */
export function patchPoint(
  id: string,
  stepNo: number,
  recorded: Checkpoint | undefined,
  deprecated: boolean,
): 'marker' | 'fresh' | 'old' {
  if (recorded === undefined) return 'fresh';
  if (recorded.name === `${PATCH_PREFIX}${id}`) return 'marker';
  if (deprecated) throw new PatchDeprecatedError(id, stepNo, recorded.name);
  return 'old';
}

/**
 * Where code that no longer calls a patch (its `deprecatePatch` removed once every episode of the
 * old branch ended) finds the step it asks for: past the markers recorded from `stepNo` on, when
 * the first step after them is `name` (the branch the code kept is the one those episodes took).
 * Null otherwise: the markers belong to a patch this code does not have.
 */
export function pastMarkers(
  checkpoints: ReadonlyMap<number, Checkpoint>,
  stepNo: number,
  name: string,
): number | null {
  let at = stepNo;
  while (checkpoints.get(at)?.name.startsWith(PATCH_PREFIX)) at++;
  return at > stepNo && checkpoints.get(at)?.name === name ? at : null;
}

/**
 * A step (or wait) asked for `name` where the journal recorded a patch's marker: the episode took
 * a patch this code does not have, so a node whose code has it must run it (EpisodeHandedBack);
 * null when the recorded step is no marker.
 */
export function missingPatch(recorded: Checkpoint, name: string): EpisodeHandedBack | null {
  if (!recorded.name.startsWith(PATCH_PREFIX) || name.startsWith(PATCH_PREFIX)) return null;
  return new EpisodeHandedBack(
    `patch ${recorded.name.slice(PATCH_PREFIX.length)}`,
    PATCH_HAND_BACK_MS,
  );
}
