import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { ActorDefinitionError } from '../actors/actor-definition.error.js';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import type { Statement } from '../database/statement.js';
import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import { claimKeyOf } from '../episodes/episode-store.js';
import { scopeKey } from '../scope/scope-key.js';
import { OutputAdapter } from './output-adapter.decorator.js';
import type { OutputDeliverer } from './output-adapter.interface.js';
import type { CycliumOutput, OutputStatus } from './output.entity.js';
import type { OutputProposal } from './output-proposal.interface.js';

/** Maps a `cyclium_outputs` row as pg returns it onto the entity's shape. */
export function toOutput(row: Record<string, unknown>): CycliumOutput {
  return {
    id: row.id as string,
    episodeId: row.episode_id as string,
    type: row.type as string,
    dedupeKey: row.dedupe_key as string,
    status: row.status as OutputStatus,
    payload: row.payload,
    deliveredRef: row.delivered_ref,
    error: row.error as string | null,
    insertedAt: row.inserted_at as Date,
    deliveredAt: row.delivered_at as Date | null,
  };
}

/**
 * Outputs are rows first, deliveries second: the post-converge transaction inserts one row per
 * dedupe key (a duplicate is success, not failure), and only the episode whose insert won
 * delivers it, after commit, through the `@OutputAdapter(type)` provider.
 */
@Injectable()
export class Outputs implements OnModuleInit {
  private readonly logger = new Logger(Outputs.name);
  private readonly adapters = new Map<string, OutputDeliverer>();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly database: CycliumDataSource,
  ) {}

  onModuleInit(): void {
    for (const wrapper of this.discovery.getProviders({ metadataKey: OutputAdapter.KEY })) {
      const type = this.discovery.getMetadataByDecorator(OutputAdapter, wrapper) as string;
      const name = wrapper.metatype?.name ?? String(wrapper.token);
      const instance = wrapper.instance as Partial<OutputDeliverer> | undefined;
      if (typeof instance?.deliver !== 'function') {
        throw new ActorDefinitionError(`@OutputAdapter('${type}') on ${name}: the class must implement deliver(output, context)`);
      }
      if (this.adapters.has(type)) throw new ActorDefinitionError(`two @OutputAdapter('${type}') providers (second: ${name})`);
      this.adapters.set(type, instance as OutputDeliverer);
    }
  }

  /** The dedupe key of a proposal: explicit keys scoped by env, otherwise derived from the episode. */
  keyOf(episode: EpisodeRow, proposal: OutputProposal, index: number): string {
    if (proposal.key !== undefined) return scopeKey(proposal.key, episode.sourceEnv);
    return `${claimKeyOf(episode)}:${proposal.type}:${index}`;
  }

  /**
   * The proposals of a converging episode as the body of a CTE of its post-converge statement
   * (`INSERT … RETURNING`), writing only when `when` holds; the rows it returns are the ones this
   * episode won, to deliver after commit (read them back with `toOutput`).
   */
  fragment(statement: Statement, episode: EpisodeRow, proposals: readonly OutputProposal[], when: string): string {
    const p = (value: unknown, cast?: string) => statement.param(value, cast);
    return `
      INSERT INTO cyclium_outputs (episode_id, type, dedupe_key, payload)
      SELECT ${p(episode.id, 'uuid')}, o.type, o.dedupe_key, o.payload
        FROM unnest(${p(proposals.map((o) => o.type), 'text[]')}, ${p(proposals.map((o, i) => this.keyOf(episode, o, i)), 'text[]')},
                    ${p(proposals.map((o) => JSON.stringify(o.payload ?? null)), 'jsonb[]')}) AS o (type, dedupe_key, payload)
       WHERE (${when})
      ON CONFLICT (dedupe_key) DO NOTHING
      RETURNING *`;
  }

  /** Delivers committed rows; each ends `delivered` or `failed` with the reason. */
  async deliver(outputs: CycliumOutput[]): Promise<void> {
    for (const output of outputs) {
      const adapter = this.adapters.get(output.type);
      try {
        if (!adapter) throw new Error(`no @OutputAdapter('${output.type}') provider`);
        const ref = await adapter.deliver(output, { idempotencyKey: output.dedupeKey });
        await this.database.sql.query(
          `UPDATE cyclium_outputs SET status = 'delivered', delivered_ref = $2, delivered_at = now(), error = NULL WHERE id = $1`,
          [output.id, JSON.stringify(ref ?? null)],
        );
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        this.logger.warn(`output ${output.dedupeKey} (${output.type}) failed: ${reason}`);
        await this.database.sql
          .query(`UPDATE cyclium_outputs SET status = 'failed', error = $2 WHERE id = $1`, [output.id, reason])
          .catch((e: unknown) => this.logger.error(`could not record output failure: ${String(e)}`));
      }
    }
  }
}
