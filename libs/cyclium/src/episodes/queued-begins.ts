import { Inject, Injectable } from '@nestjs/common';
import { WorkClaims } from '../leases/work-claims.service.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { claimKeyOf, claimKeyOfRow } from '../claims/claim-keys.js';
import {
  batchedAcquire,
  claimBegun,
  type AcquireMany,
  type BeginOutcome,
} from './episode-statements.js';
import { takeQueued, type TakeRefs } from './episode-queue.js';
import { toEpisode } from './episode-store.js';

/** The claim key of a cyclium_episodes row `e`, as claimKeyOf spells it. */
export const KEY_OF_ROW = claimKeyOfRow('e');

/**
 * Queued episodes started in one statement: up to one row per free slot taken from a queue (this
 * node's, or a full peer's), moved to running, each with its claim, as BeginWrites does for fresh
 * begins. Slots that free together leave together, where a transaction per row cost four round
 * trips and a commit each. A claim found busy leaves nothing of the statement (`busy`), and the
 * caller takes one row at a time, so that row gets the answer it always had.
 */
@Injectable()
export class QueuedBegins {
  private acquireMany: AcquireMany | null | undefined;

  constructor(
    private readonly database: CycliumDataSource,
    private readonly claims: WorkClaims,
    private readonly identity: NodeIdentity,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
  ) {}

  /**
   * True when a take is one statement here (claims on and joined, and no `episode.started` to
   * write).
   */
  get available(): boolean {
    if (this.acquireMany === undefined)
      this.acquireMany = batchedAcquire(this.claims, this.options);
    return this.acquireMany !== null;
  }

  /**
   * Starts up to `limit` queued episodes of `actorId`, of its `expectations` (fewer: the queue had
   * no more); `busy` when a claim was. Use only when `available`.
   */
  async take(
    actorId: string,
    expectations: readonly string[],
    limit: number,
    from: 'own' | 'peer',
  ): Promise<Array<Extract<BeginOutcome, { status: 'started' }>> | 'busy'> {
    const statement = new Statement(`take_${from}`);
    const p = (value: unknown, cast: string) => statement.param(value, cast);
    const owner = p(this.identity.name(), 'text');
    const base = {
      owner,
      actorId: p(actorId, 'text'),
      expectations: p(expectations, 'text[]'),
      limit: p(limit, 'int'),
    };
    const refs: TakeRefs =
      from === 'own'
        ? { ...base, from }
        : {
            ...base,
            from,
            stack: p(this.options.stackSlug, 'text'),
            env: p(this.options.env, 'text'),
          };
    for (const [name, body] of takeQueued(refs)) statement.with(name, body);
    statement.with('began', `SELECT ${KEY_OF_ROW} AS key FROM ep e`);
    const { rows, sentAt } = await claimBegun(
      this.database.sql,
      statement,
      this.acquireMany as AcquireMany,
      { owner, leaseSeconds: p(this.claims.leaseSeconds, 'double precision') },
      `FROM ep e LEFT JOIN claim c ON c.key = ${KEY_OF_ROW}
         ORDER BY e.queued_at, e.id`,
    );
    if (rows === 'busy') return 'busy';
    return rows.map((row) => {
      const episode = toEpisode(row);
      return {
        status: 'started' as const,
        episode,
        grant: this.claims.grantOf(row, claimKeyOf(episode), sentAt),
      };
    });
  }
}
