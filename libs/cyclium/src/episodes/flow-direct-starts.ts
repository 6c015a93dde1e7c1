import type { Statement } from '../sql/statement.js';
import { INPUT_COLUMNS } from './episode-inserts.js';
import type { AdmissionRequest } from './flow-admissions.js';

/**
 * The fresh rows of one expectation and env in a batch of throttled inserts that may start in the
 * insert itself, into the slots their node reserved (`request.max`).
 */
export interface DirectGroup {
  request: AdmissionRequest;
  /** The concurrency keys and the rate keys ('' for none) of the group's rows. */
  keys: string[];
  rateKeys: string[];
}

/** Which group (1-based, in `groups` order) each input row may start into, and its version then. */
export interface DirectSlots {
  group: Array<number | null>;
  version: Array<string | null>;
}

/**
 * Adds to `statement` the CTEs that decide which rows of `input` (an episodeInput CTE of throttled
 * rows) start running on `owner` as they are inserted:
 *
 * - `room`: per group (`g`), what its limits leave, read by cyclium_flow_room under the admission's
 *   lock. The calls run in `groups` order, which the caller sorts, so two batches take the locks
 *   of the same expectations in one order.
 * - `fits`: the rows that start (`n`, `g`, `rate_key`). A group with a throttled row ahead of its
 *   fresh ones starts none here: the admission orders them all. Otherwise rows take their turns as
 *   the admission would give them (a key's next row after the rows of keys with fewer running,
 *   then by priority, then in arrival order) while their key, the expectation's total, the
 *   reserved slots and their rate window allow. A row a later check refuses has used its place in
 *   the earlier ones, so the count may start fewer than the limits allow, never more; what stays
 *   throttled is the flow queue's to start.
 * - `decided`: the input, with the rows that start as running on `owner` with their version.
 * - `direct_starts`: the rate windows' starts of the rows inserted running.
 *
 * `ep` (the insert of `decided`) must be added after `decided` and before `direct_starts`.
 */
export function directStarts(
  statement: Statement,
  input: string,
  groups: readonly DirectGroup[],
  slots: DirectSlots,
  owner: string,
): { before: Array<[string, string]>; after: Array<[string, string]> } {
  const p = (value: unknown, cast: string) => statement.param(value, cast);
  const room = groups
    .map(({ request, keys, rateKeys }, i) => {
      const { limits } = request;
      const args = [
        p(request.actorId, 'text'),
        p(request.expectationId, 'text'),
        p(request.env, 'text'),
        p(limits.total, 'int'),
        p(limits.rate, 'int'),
        p(limits.periodMs, 'double precision'),
        p(request.versions, 'text[]'),
        p(keys, 'text[]'),
        p(rateKeys, 'text[]'),
      ];
      return `SELECT ${i + 1} AS g, ${p(limits.limit, 'int')} AS lim,
                     ${p(limits.total, 'int')} AS tot, ${p(limits.rate, 'int')} AS rate,
                     ${p(request.max, 'int')} AS max, r.*
                FROM cyclium_flow_room(${args.join(', ')}) r`;
    })
    .join('\nUNION ALL\n');
  const slot = `SELECT * FROM unnest(${p(slots.group, 'int[]')}, ${p(slots.version, 'text[]')})
                  WITH ORDINALITY AS s (g, version, n)`;
  const turns = `
    SELECT i.n, r.g, i.priority, coalesce(i.rate_key, '') AS rate_key,
           coalesce((r.running ->> i.flow_key)::int, 0)
             + row_number() OVER (PARTITION BY r.g, i.flow_key
                                  ORDER BY i.priority DESC, i.n) AS turn
      FROM ${input} i JOIN slot s ON s.n = i.n JOIN room r ON r.g = s.g
     WHERE NOT r.waiting`;
  const placed = `
    SELECT t.*, row_number() OVER (PARTITION BY t.g ORDER BY t.turn, t.priority DESC, t.n) AS place
      FROM turns t JOIN room r ON r.g = t.g
     WHERE r.lim IS NULL OR t.turn <= r.lim`;
  const paced = `
    SELECT c.n, c.g, c.rate_key,
           row_number() OVER (PARTITION BY c.g, c.rate_key ORDER BY c.place) AS start_no
      FROM placed c JOIN room r ON r.g = c.g
     WHERE c.place <= r.max AND (r.tot IS NULL OR r.total + c.place <= r.tot)`;
  const fits = `
    SELECT c.n, c.g, c.rate_key FROM paced c JOIN room r ON r.g = c.g
     WHERE r.rate IS NULL OR coalesce((r.starts ->> c.rate_key)::int, 0) + c.start_no <= r.rate`;
  const override: Partial<Record<(typeof INPUT_COLUMNS)[number], string>> = {
    status: `CASE WHEN f.n IS NULL THEN i.status ELSE 'running' END`,
    owner_node: `CASE WHEN f.n IS NULL THEN i.owner_node ELSE ${owner} END`,
    version: `CASE WHEN f.n IS NULL THEN i.version ELSE s.version END`,
  };
  const columns = INPUT_COLUMNS.map((c) => `${override[c] ?? `i.${c}`} AS ${c}`).join(', ');
  const decided = `SELECT ${columns}
                     FROM ${input} i LEFT JOIN fits f ON f.n = i.n LEFT JOIN slot s ON s.n = i.n`;
  const started = `
    INSERT INTO cyclium_flow_starts (actor_id, expectation_id, source_env, rate_key, started_at)
    SELECT e.actor_id, e.expectation_id, e.source_env, f.rate_key, r.now_at
      FROM ep e JOIN ${input} i ON i.id = e.id JOIN fits f ON f.n = i.n JOIN room r ON r.g = f.g
     WHERE r.rate IS NOT NULL AND e.status = 'running'`;
  return {
    before: [
      ['room', room],
      ['slot', slot],
      ['turns', turns],
      ['placed', placed],
      ['paced', paced],
      ['fits', fits],
      ['decided', decided],
    ],
    after: [['direct_starts', started]],
  };
}
