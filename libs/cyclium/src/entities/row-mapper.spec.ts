import { describe, expect, it } from '@jest/globals';
import { CycliumEpisodeStep } from './episode-step.entity.js';
import { CycliumTriggerRequest } from './trigger-request.entity.js';
import { emptyWhenAbsent, nullWhenAbsent, rowMapper } from './row-mapper.js';

describe('rowMapper', () => {
  it('maps every declared column onto its property, in declaration order, and nothing else', () => {
    const toStep = rowMapper(CycliumEpisodeStep);
    const createdAt = new Date();
    const row = {
      episode_id: 'e',
      step_no: 2,
      kind: 'step',
      name: 'n',
      result_ref: { a: 1 },
      error_class: null,
      duration_ms: 5,
      created_at: createdAt,
      extra: 1,
    };
    const step = toStep(row);
    expect(Object.keys(step)).toEqual([
      'episodeId',
      'stepNo',
      'kind',
      'name',
      'resultRef',
      'errorClass',
      'durationMs',
      'createdAt',
    ]);
    expect(step).toStrictEqual({
      episodeId: 'e',
      stepNo: 2,
      kind: 'step',
      name: 'n',
      resultRef: { a: 1 },
      errorClass: null,
      durationMs: 5,
      createdAt,
    });
    expect(Object.getPrototypeOf(step)).toBe(Object.prototype);
  });

  it('leaves a column the row lacks undefined unless a conversion defaults it', () => {
    const toRequest = rowMapper(CycliumTriggerRequest, {
      opts: emptyWhenAbsent,
      notBefore: nullWhenAbsent,
    });
    const request = toRequest({ id: 'r' });
    expect(request.id).toBe('r');
    expect('claimedBy' in request && request.claimedBy === undefined).toBe(true);
    expect(request.notBefore).toBeNull();
    expect(request.opts).toEqual({});
    expect(toRequest({}).opts).not.toBe(request.opts);
    expect(toRequest({ opts: { resume: true } }).opts).toEqual({ resume: true });
  });

  it('refuses a conversion for a property the entity has no column for', () => {
    expect(() => rowMapper(CycliumEpisodeStep, { nope: nullWhenAbsent } as never)).toThrow(
      /no column for the property nope/,
    );
  });
});
