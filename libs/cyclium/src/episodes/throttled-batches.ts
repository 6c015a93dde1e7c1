import type { NewEpisode } from './episode-inserts.js';
import type { AdmissionRequest, Admitted } from './flow-admissions.js';

/** One trigger of a limited expectation in a batch of throttled inserts. */
export interface ThrottledInsert {
  id: string;
  spec: NewEpisode;
  /** The admission this insert may run in its statement (one slot reserved for it); null: none. */
  admit: AdmissionRequest | null;
}

/** The admissions of a batch, one per expectation and env, with the inserts that asked for them. */
export interface AdmissionGroup {
  request: AdmissionRequest;
  items: ThrottledInsert[];
}

/**
 * One group per expectation and env that the batch's admissions name, its slots summed, in one
 * order for every batch: the groups' locks are taken in it, so two batches never wait on each
 * other.
 */
export function groupsOf(items: readonly ThrottledInsert[]): AdmissionGroup[] {
  const groups = new Map<string, AdmissionGroup>();
  for (const item of items) {
    if (!item.admit) continue;
    const key = groupKey(item.admit);
    const group = groups.get(key);
    if (group) {
      group.request = { ...group.request, max: group.request.max + item.admit.max };
      group.items.push(item);
    } else groups.set(key, { request: item.admit, items: [item] });
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, g]) => g);
}

export function groupKey(
  of: { actorId: string; expectationId: string } & (
    { env: string | null } | { sourceEnv: string | null }
  ),
): string {
  const env = 'env' in of ? of.env : of.sourceEnv;
  return JSON.stringify([of.actorId, of.expectationId, env]);
}

/**
 * Which item each started episode is answered to: a row started in its own insert to its own item
 * (it answers `started`), the rows an admission started to the items of their group that have
 * none, one each (each holds the slot reserved for it).
 */
export function handOut(
  items: readonly ThrottledInsert[],
  groups: readonly AdmissionGroup[],
  started: ReadonlyMap<string, Admitted>,
): Map<ThrottledInsert, Admitted> {
  const answers = new Map<ThrottledInsert, Admitted>();
  for (const item of items) {
    const own = started.get(item.id);
    if (own && item.admit) answers.set(item, own);
  }
  const mine = new Set(answers.values());
  const waiting = new Map(
    groups.map((g) => [groupKey(g.request), g.items.filter((item) => !answers.has(item))]),
  );
  for (const admitted of started.values()) {
    if (mine.has(admitted)) continue;
    const item = waiting.get(groupKey(admitted.episode))?.shift();
    if (!item) throw new Error(`admitted ${admitted.episode.id} beyond the slots reserved for it`);
    answers.set(item, admitted);
  }
  return answers;
}
