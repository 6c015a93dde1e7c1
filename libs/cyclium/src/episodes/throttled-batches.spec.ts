import { describe, expect, it } from '@jest/globals';
import type { AcquireResult } from '../claims/work-claims-adapter.interface.js';
import type { EpisodeRow } from './episode-context.interface.js';
import type { Admitted, AdmissionRequest } from './flow-admissions.js';
import type { NewEpisode } from './episode-inserts.js';
import { groupsOf, handOut, type ThrottledInsert } from './throttled-batches.js';

const request = (expectationId: string): AdmissionRequest => ({
  actorId: 'a',
  expectationId,
  env: null,
  limits: { limit: 1, total: null, rate: null, periodMs: null },
  max: 1,
  versions: [],
});
const insert = (id: string, expectationId: string, admit = true): ThrottledInsert => ({
  id,
  spec: {} as NewEpisode,
  admit: admit ? request(expectationId) : null,
});
const started = (id: string, expectationId: string): Admitted => ({
  episode: { id, actorId: 'a', expectationId, sourceEnv: null } as EpisodeRow,
  grant: {} as AcquireResult,
  resumed: false,
});

describe('throttled batches', () => {
  it('groups the admissions of a batch in one order, whatever the order of its inserts', () => {
    const one = groupsOf([insert('1', 'y'), insert('2', 'x'), insert('3', 'y'), insert('4', 'z')]);
    const other = groupsOf([insert('5', 'z'), insert('6', 'x'), insert('7', 'y')]);
    expect(one.map((g) => g.request.expectationId)).toEqual(['x', 'y', 'z']);
    expect(other.map((g) => g.request.expectationId)).toEqual(['x', 'y', 'z']);
    expect(one[1]!.request.max).toBe(2);
    expect(groupsOf([insert('8', 'x', false)])).toEqual([]);
  });

  it('answers a row started in its own insert to its item, the others one per free item', () => {
    const items = [insert('1', 'x'), insert('2', 'x'), insert('3', 'x')];
    const groups = groupsOf(items);
    // The second item's own row started, and an older throttled row the admission chose.
    const own = started('2', 'x');
    const older = started('old', 'x');
    const answers = handOut(
      items,
      groups,
      new Map([
        ['old', older],
        ['2', own],
      ]),
    );
    expect(answers.get(items[1]!)).toBe(own);
    expect(answers.get(items[0]!)).toBe(older);
    expect(answers.has(items[2]!)).toBe(false);
  });

  it('refuses more started rows than the slots reserved for them', () => {
    const items = [insert('1', 'x')];
    const rows = new Map([
      ['p', started('p', 'x')],
      ['q', started('q', 'x')],
    ]);
    expect(() => handOut(items, groupsOf(items), rows)).toThrow(/beyond the slots/);
  });
});
