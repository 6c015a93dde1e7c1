import { ForbiddenException, Inject, Injectable, NotFoundException } from '@nestjs/common';
import { Episodes } from '../dispatch/episodes.service.js';
import { CycliumStatus } from '../health/cyclium-status.service.js';
import { CYCLIUM_OPS_OPTIONS, type CycliumOpsOptions } from './ops-options.interface.js';

/** The episode filters a list or a bulk action receives: `undefined` is every stack (or env). */
export interface ScopeFilters {
  sourceStack?: string | null;
  sourceEnv?: string | null;
}

/**
 * Which episodes this operations module shows and acts on: by default only those of its node's
 * stack and env (`scope: 'own'`), so one team's page in a shared database cannot read or cancel
 * another's work; `scope: 'all'` opens every stack and env.
 */
@Injectable()
export class OpsScope {
  constructor(
    @Inject(CYCLIUM_OPS_OPTIONS) private readonly ops: CycliumOpsOptions,
    private readonly status: CycliumStatus,
    private readonly episodes: Episodes,
  ) {}

  get all(): boolean {
    return this.ops.scope === 'all';
  }

  /** This node's stack and env, which `scope: 'own'` pins every list to. */
  get own(): { stack: string | null; env: string | null } {
    const { stack, env } = this.status.snapshot();
    return { stack: stack ?? null, env: env ?? null };
  }

  /**
   * The list filters to use: as asked under `all`; pinned to this stack and env under `own`, where
   * asking for another is a 403 naming the field.
   */
  filters(asked: { stack?: string; env?: string }): ScopeFilters {
    if (this.all) return { sourceStack: asked.stack, sourceEnv: asked.env };
    const { stack, env } = this.own;
    for (const [field, value, mine] of [
      ['stack', asked.stack, stack],
      ['env', asked.env, env],
    ] as const) {
      if (value !== undefined && value !== mine)
        throw new ForbiddenException(
          `${field}: this operations module shows its own stack and env only (scope 'own'; ` +
            `CycliumOpsModule.forRoot({ scope: 'all' }) opens the others)`,
        );
    }
    return { sourceStack: stack, sourceEnv: env };
  }

  /**
   * Refuses an episode of another stack or env under `own` as if it did not exist (404): its id
   * alone tells nothing about the other scope's work.
   */
  async admit(id: string): Promise<void> {
    if (this.all) return;
    const episode = await this.episodes.get(id);
    if (episode && !this.owns(episode)) throw new NotFoundException(`no episode ${id}`);
  }

  owns(episode: { sourceStack: string | null; sourceEnv: string | null }): boolean {
    if (this.all) return true;
    const { stack, env } = this.own;
    return episode.sourceStack === stack && episode.sourceEnv === env;
  }
}
