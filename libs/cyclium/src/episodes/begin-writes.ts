import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { BatchedWrites, type BatchAnswer } from './batched-writes.js';
import {
  EpisodeStatements,
  batchedAcquire,
  claimBegun,
  type AcquireMany,
  type BeginOutcome,
  type BeginRow,
} from './episode-statements.js';
import { begunEpisode } from './episode-store.js';
import {
  episodeInput,
  insertEpisodes,
  insertOf,
  isFresh,
  rowFirstClaim,
  rowFirstKind,
  type EpisodeInsert,
  type NewEpisode,
} from './episode-inserts.js';
import { EpisodeSignatures } from './episode-signatures.js';
import { claimKeyOf } from '../claims/claim-keys.js';

interface BeginWrite {
  id: string;
  key: string;
  spec: NewEpisode;
}

/**
 * Every begin of this node that is one statement (EpisodeStatements.begin). Begins that arrive
 * while another is in flight leave together as one statement, group-committed as step writes
 * are: the dedupe index still decides each insert, and only an insert that won takes its claim.
 * When a claim turns out busy, or PostgreSQL refuses the batch for any reason but being away,
 * nothing of the batch stays and every begin of it runs again alone, so its own outcome (busy,
 * duplicate, an error) is the one it would have had alone. A lone begin goes out at once, alone.
 * With claims off, another adapter, or `startedEvents`, each begin is written alone.
 */
@Injectable()
export class BeginWrites {
  private readonly batches = new BatchedWrites<BeginWrite, BeginOutcome>(
    (b) => this.statements.begin(b.spec),
    (items) => this.beginMany(items),
  );
  /**
   * The claims fragment a batch needs, resolved at the first begin (null: this setup cannot batch).
   */
  private acquireMany: AcquireMany | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly statements: EpisodeStatements,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    private readonly signatures: EpisodeSignatures,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /** EpisodeStatements.begin, batched with others when it can be. */
  async begin(spec: NewEpisode): Promise<BeginOutcome> {
    if (!this.batchFragment()) return this.statements.begin(spec);
    const id = randomUUID();
    return this.batches.write({ id, key: claimKeyOf({ id, dedupeKey: spec.dedupeKey }), spec });
  }

  private batchFragment(): AcquireMany | null {
    if (this.acquireMany === undefined)
      this.acquireMany = batchedAcquire(this.claims, this.options);
    return this.acquireMany;
  }

  private async beginMany(items: BeginWrite[]): Promise<BatchAnswer<BeginOutcome>> {
    const fresh = items.every((b) => isFresh(b.spec));
    const rowClaims = this.claims.inStatement().fragments.episodeRows === true;
    // Not all new: each row with one of the library's own keys takes its claim unless the claim
    // table has the key (rowFirstClaim).
    const rowFirst = !fresh && rowClaims;
    const statement = new Statement(
      fresh ? 'begin_many_fresh' : rowFirst ? 'begin_many_row_first' : 'begin_many',
    );
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    const inserts = items.map((b) => this.signatures.signed(insertOf(b.id, b.spec, 'running')));
    const claim = {
      owner: p(this.identity.name(), 'text'),
      leaseSeconds: p(this.claims.leaseSeconds, 'double precision'),
    };
    statement.with('input', episodeInput(statement, inserts));
    statement.with(
      'ep',
      insertEpisodes(
        'input',
        fresh ? 'fail' : 'skip',
        'begun',
        fresh && rowClaims
          ? claim
          : rowFirst
            ? { ...claim, when: `i.dedupe_key IS NULL OR ${rowFirstClaim('i')}` }
            : undefined,
      ),
    );
    statement.with(
      'began',
      `SELECT i.key, (i.dedupe_key IS NULL OR ${rowFirstKind('i')}) AS in_row
         FROM input i JOIN ep ON ep.id = i.id`,
    );
    const { rows, sentAt } = await claimBegun(
      this.database.sql,
      statement,
      this.batchFragment() as AcquireMany,
      { ...claim, fresh, ...(rowFirst ? { inRow: 'i.in_row' } : {}) },
      `FROM input i LEFT JOIN ep e ON e.id = i.id LEFT JOIN claim c ON c.key = i.key
        AND e.id IS NOT NULL
         ORDER BY i.n`,
    );
    // A busy claim left nothing of the batch: alone, each begin gets its own answer (busy, started,
    // an error).
    if (rows === 'busy') return 'alone';
    return items.map((item, i) => {
      const row = rows[i] as BeginRow;
      return row.id === null
        ? { status: 'duplicate' }
        : {
            status: 'started',
            episode: begunEpisode(inserts[i] as EpisodeInsert, row),
            grant: this.claims.grantOf(row, item.key, sentAt),
          };
    });
  }
}
