import { Injectable } from '@nestjs/common';
import type { Statement } from '../sql/statement.js';
import type { CycliumEpisode } from '../entities/episode.entity.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { scopeKey } from '../scope/scope-key.js';
import { OutputAdapters } from './output-adapters.service.js';
import { OutputDelivery } from './output-delivery.service.js';
import { OutputStore, firstLease } from './output-store.js';
import type { CycliumOutput } from '../entities/output.entity.js';
import type { OutputProposal } from './output-proposal.interface.js';
import { claimKeyOf } from '../claims/claim-keys.js';
import { isUuid } from '../sql/uuid.js';

export { toOutput } from './output-row.js';

/**
 * Outputs are rows first, deliveries second (an outbox): the post-converge statement inserts one
 * row per dedupe key (a duplicate is success, not failure), already leased to this node when it
 * hosts the type, and the episode whose insert won delivers it after commit. Whatever that
 * delivery does not finish — the node died, the adapter hung or threw — any live node hosting the
 * type takes later (OutputRescue), so delivery is at least once, with a stable idempotency key.
 */
@Injectable()
export class Outputs {
  constructor(
    private readonly adapters: OutputAdapters,
    private readonly delivery: OutputDelivery,
    private readonly identity: NodeIdentity,
    private readonly store: OutputStore,
  ) {}

  /** One episode's outputs, in the order its end wrote them (at most 500). */
  forEpisode(episodeId: string): Promise<CycliumOutput[]> {
    return isUuid(episodeId) ? this.store.forEpisode(episodeId) : Promise.resolve([]);
  }

  /**
   * The dedupe key of a proposal: explicit keys scoped by env, otherwise derived from the episode.
   */
  keyOf(episode: CycliumEpisode, proposal: OutputProposal, index: number): string {
    if (proposal.key !== undefined) return scopeKey(proposal.key, episode.sourceEnv);
    return `${claimKeyOf(episode)}:${proposal.type}:${index}`;
  }

  /**
   * The proposals of a converging episode as the body of a CTE of its post-converge statement
   * (`INSERT … RETURNING`), writing only when `when` holds; the rows it returns are the ones this
   * episode won, to deliver after commit (read them back with `toOutput`); see reclaim for the
   * others. Each row is leased as firstLease says.
   */
  fragment(
    statement: Statement,
    episode: CycliumEpisode,
    proposals: readonly OutputProposal[],
    when: string,
  ): string {
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    const [attempts, leaseOwner, nextAttemptAt] = firstLease({
      type: 'o.type',
      hosted: p(this.adapters.types(), 'text[]'),
      owner: p(this.identity.name(), 'text'),
      leaseMs: p(this.delivery.leaseMs),
    });
    return `
      INSERT INTO cyclium_outputs (episode_id, type, dedupe_key, payload, attempts, lease_owner,
                                   next_attempt_at, source_stack, source_env)
      SELECT ${p(episode.id, 'uuid')}, o.type, o.dedupe_key, o.payload, ${attempts}, ${leaseOwner},
             ${nextAttemptAt},
             ${p(episode.sourceStack, 'text')}, ${p(episode.sourceEnv, 'text')}
        FROM unnest(${statement.arrays([
          [proposals.map((o) => o.type), 'text[]'],
          [proposals.map((o, i) => this.keyOf(episode, o, i)), 'text[]'],
          [proposals.map((o) => JSON.stringify(o.payload ?? null)), 'jsonb[]'],
        ])}) AS o (type, dedupe_key, payload)
       WHERE (${when})
      ON CONFLICT (dedupe_key) DO NOTHING
      RETURNING *`;
  }

  /**
   * After the end committed: the proposals whose insert met a row already under their key (`won`
   * lacks them) take that row over when no episode's end wrote it (OWNED_OUTPUT), and are
   * returned to deliver. Whether a row is owned cannot be asked inside the end statement: a row
   * another episode's end committed while it ran is not owned in its snapshot, though it is. Costs
   * a transaction only when some proposal lost its key, which two episodes proposing one key do.
   */
  async reclaim(
    episode: CycliumEpisode,
    proposals: readonly OutputProposal[],
    won: readonly CycliumOutput[],
  ): Promise<CycliumOutput[]> {
    const taken = new Set(won.map((row) => row.dedupeKey));
    const lost = proposals
      .map((proposal, i) => ({ proposal, key: this.keyOf(episode, proposal, i) }))
      .filter(({ key }) => !taken.has(key));
    if (lost.length === 0) return [];
    return this.store.reclaim(episode.id, {
      types: lost.map(({ proposal }) => proposal.type),
      keys: lost.map(({ key }) => key),
      payloads: lost.map(({ proposal }) => JSON.stringify(proposal.payload ?? null)),
      hosted: this.adapters.types(),
      owner: this.identity.name(),
      leaseMs: this.delivery.leaseMs,
    });
  }

  /**
   * Delivers the rows an end statement sent at `sentAt` (performance.now()) inserted; each ends
   * `delivered`, due for a retry, or `failed` with the reason. Rows leased to no one (types this
   * node does not host) are left to the nodes that do.
   */
  async deliver(outputs: CycliumOutput[], sentAt = performance.now()): Promise<void> {
    const mine = this.identity.name();
    await this.delivery.deliver(
      outputs.filter((output) => output.leaseOwner === mine),
      sentAt,
    );
  }
}
