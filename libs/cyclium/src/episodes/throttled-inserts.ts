import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { WorkClaims } from '../leases/work-claims.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { Statement } from '../sql/statement.js';
import { claimKeyOf } from '../claims/claim-keys.js';
import { BatchedWrites, type BatchAnswer } from './batched-writes.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { episodeInput, insertEpisodes, insertOf, type NewEpisode } from './episode-inserts.js';
import { EpisodeSignatures } from './episode-signatures.js';
import {
  batchedAcquire,
  beginColumns,
  queryBegin,
  type AcquireMany,
  type BeginRow,
} from './episode-statements.js';
import { toEpisode } from './episode-store.js';
import { admitCall, type AdmissionRequest, type Admitted } from './flow-admissions.js';
import { directStarts } from './flow-direct-starts.js';
import { KEY_OF_ROW } from './queued-begins.js';
import {
  groupKey,
  groupsOf,
  handOut,
  type AdmissionGroup,
  type ThrottledInsert,
} from './throttled-batches.js';

/** What became of one insert: its row (null: a duplicate), and what its admission started. */
export interface ThrottledStart {
  episode: EpisodeRow | null;
  /** At most one episode (this one, or a throttled one before it), started here with its claim. */
  admitted: Admitted | null;
  /**
   * The row stays throttled and no admission has looked at its expectation since it was written:
   * the flow queue must look.
   */
  unseen: boolean;
}

/**
 * The inserts of limited expectations' triggers, group-committed as fresh begins are
 * (BeginWrites): the triggers that arrive while one insert is in flight leave together as one
 * statement, and the dedupe index still decides each row. An insert whose node had a free slot for
 * it carries an admission, so a trigger that the limits allow starts in the round trip of its
 * insert, as an unlimited begin does: with nothing throttled ahead of it, it is inserted running
 * when its limits leave room (flow-direct-starts); behind a throttled row, it is inserted
 * `throttled` and cyclium_flow_admit, run in the same statement once the rows are in, starts what
 * the limits allow in their order. Either way the claims of what starts are taken in the same
 * statement. A claim found busy leaves nothing of that statement: the rows are inserted again
 * without admissions, and the flow queue starts them.
 */
@Injectable()
export class ThrottledInserts {
  private readonly batches = new BatchedWrites<ThrottledInsert, ThrottledStart>(
    async (item) => (await this.write([item]))[0] as ThrottledStart,
    (items) => this.writeMany(items),
  );
  private acquireMany: AcquireMany | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly signatures: EpisodeSignatures,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** True when an insert can carry an admission (claims that join one statement). */
  get admitsInline(): boolean {
    if (this.acquireMany === undefined)
      this.acquireMany = batchedAcquire(this.claims, this.options);
    return this.acquireMany !== null;
  }

  /**
   * Inserts `spec` as a throttled row, and with `admit` (one slot reserved by the caller, and only
   * when admitsInline) starts what the limits allow into that slot in the same statement.
   */
  insert(
    spec: Omit<NewEpisode, 'status' | 'ownerNode'>,
    admit: AdmissionRequest | null,
  ): Promise<ThrottledStart> {
    return this.batches.write({
      id: randomUUID(),
      spec: { ...spec, status: 'throttled', ownerNode: null },
      admit: admit && this.admitsInline ? admit : null,
    });
  }

  private writeMany(items: ThrottledInsert[]): Promise<BatchAnswer<ThrottledStart>> {
    return this.write(items);
  }

  /** The rows of `items` in one statement, in order, with their admissions when they carry any. */
  private async write(items: ThrottledInsert[]): Promise<ThrottledStart[]> {
    const groups = groupsOf(items);
    if (groups.length > 0) {
      const admitted = await this.insertAndAdmit(items, groups);
      if (admitted !== 'busy') return admitted;
    }
    const statement = new Statement('episodes_throttled');
    statement.with('ep', insertEpisodes(`(${this.input(statement, items)})`));
    const { rows } = await this.database.sql.query(statement.build('SELECT * FROM ep'));
    const byId = new Map(rows.map((row: Record<string, unknown>) => [row.id, toEpisode(row)]));
    return items.map((item) => {
      const episode = byId.get(item.id) ?? null;
      return { episode, admitted: null, unseen: episode !== null };
    });
  }

  private input(statement: Statement, items: ThrottledInsert[]): string {
    const rows = items.map((item) =>
      this.signatures.signed(insertOf(item.id, item.spec, 'throttled')),
    );
    return episodeInput(statement, rows);
  }

  /**
   * One statement: what each group's limits leave (under its admission's lock), the inserts (the
   * rows that fit running), then the admission of each group with a throttled row ahead of its
   * fresh ones (seeing the rows inserted), then the claims of what started. `busy`: a claim was,
   * and nothing was written.
   */
  private async insertAndAdmit(
    items: ThrottledInsert[],
    groups: AdmissionGroup[],
  ): Promise<ThrottledStart[] | 'busy'> {
    const statement = new Statement(`episodes_throttled_admit_${groups.length}`);
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    const owner = p(this.identity.name(), 'text');
    const place = new Map(groups.map((g, i) => [groupKey(g.request), i + 1]));
    const slotOf = (item: ThrottledInsert) =>
      item.admit ? (place.get(groupKey(item.admit)) ?? null) : null;
    statement.with('input', this.input(statement, items));
    const direct = directStarts(
      statement,
      'input',
      groups.map((g) => ({
        request: g.request,
        keys: g.items.map((item) => item.spec.flow?.key ?? ''),
        rateKeys: g.items.map((item) => item.spec.flow?.rateKey ?? ''),
      })),
      {
        group: items.map(slotOf),
        version: items.map((item) => item.spec.version ?? null),
      },
      owner,
    );
    for (const [name, body] of direct.before) statement.with(name, body);
    statement.with('ep', insertEpisodes('decided'));
    for (const [name, body] of direct.after) statement.with(name, body);
    statement.with(
      'adm',
      groups
        .map((g, i) => {
          const waiting = `(SELECT r.waiting FROM room r WHERE r.g = ${i + 1})`;
          return `SELECT * FROM ${admitCall(statement, g.request, owner, 'ep', waiting)}`;
        })
        .join('\nUNION ALL\n'),
    );
    statement.with(
      'started',
      `SELECT (a.episode).*, a.resumed AS flow_resumed FROM adm a WHERE (a.episode).id IS NOT NULL
       UNION ALL
       SELECT e.*, false FROM ep e WHERE e.status = 'running'`,
    );
    statement.with('began', `SELECT ${KEY_OF_ROW} AS key FROM started e`);
    const leaseSeconds = p(this.claims.leaseSeconds, 'double precision');
    for (const [name, body] of (this.acquireMany as AcquireMany)({
      input: 'began',
      owner,
      leaseSeconds,
    }))
      statement.with(name, body);
    const sentAt = performance.now();
    // The rows left throttled, each with whether its group's admission looked after its insert.
    const rows = await queryBegin(
      this.database.sql,
      statement.build(`
        SELECT ${beginColumns(statement, 'c.key IS NULL')}, true AS flow_admitted,
               false AS flow_looked
          FROM started e LEFT JOIN claim c ON c.key = ${KEY_OF_ROW}
        UNION ALL
        SELECT ${beginColumns(statement, 'false')}, false, coalesce(r.waiting, false)
          FROM (SELECT ep.*, false AS flow_resumed FROM ep) e
          JOIN input i ON i.id = e.id LEFT JOIN slot s ON s.n = i.n
          LEFT JOIN room r ON r.g = s.g LEFT JOIN claim c ON false
         WHERE e.status = 'throttled'`),
    );
    if (rows === 'busy') return 'busy';
    return this.answers(items, groups, rows, sentAt);
  }

  /**
   * Each item's row, and what started for it (handOut).
   */
  private answers(
    items: ThrottledInsert[],
    groups: AdmissionGroup[],
    rows: BeginRow[],
    sentAt: number,
  ): ThrottledStart[] {
    const throttled = new Map<unknown, { episode: EpisodeRow; looked: boolean }>();
    const started = new Map<string, Admitted>();
    for (const row of rows) {
      const episode = toEpisode(row);
      if (row.flow_admitted !== true) {
        throttled.set(row.id, { episode, looked: row.flow_looked === true });
        continue;
      }
      const grant = this.claims.grantOf(row, claimKeyOf(episode), sentAt);
      started.set(episode.id, { episode, grant, resumed: row.flow_resumed === true });
    }
    const answers = handOut(items, groups, started);
    return items.map((item) => {
      const left = throttled.get(item.id);
      return {
        // A row both inserted and started is answered as inserted (its first state).
        episode: left?.episode ?? started.get(item.id)?.episode ?? null,
        admitted: answers.get(item) ?? null,
        unseen: left !== undefined && !left.looked && !started.has(item.id),
      };
    });
  }
}
