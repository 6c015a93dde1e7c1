import type { EpisodeRow } from '../episodes/episode-context.interface.js';
import type { RecoveryPolicy } from '../options/cyclium-options.interface.js';

/** Options of `Recovery.sweep`. */
export interface SweepOptions {
  /** Default: `recovery.staleAfterMs`. */
  staleAfterMs?: number;
  /** Default: this node's stack (unset: every stack). Rows with no stack match any stack. */
  sourceStack?: string | null;
  /** Default: this node's env; matched strictly (`null` is the default env). */
  sourceEnv?: string | null;
  /** Decides the policy per episode, ahead of the expectation's `recoveryPolicy`. */
  resolvePolicy?: (episode: EpisodeRow) => RecoveryPolicy;
}

/**
 * Why a candidate was left: a live claim holds it, another node took it first, its actor runs
 * elsewhere, or the attempt failed.
 */
export type SkipReason = 'busy' | 'taken' | 'not_hosted' | 'error';

/** What one recovery sweep did with the orphans it found. */
export interface SweepResult {
  restarted: number;
  /**
   * Restarts handed to a full node as trigger requests (this node, or the actor here, is
   * trigger-only; or another stack hosts it).
   */
  deferred: number;
  failed: number;
  /**
   * Episodes of an expectation no live node has declared for `recovery.notHostedGraceMs`, failed as
   * `not_hosted`.
   */
  notHosted: number;
  skipped: number;
  skippedFor: Partial<Record<SkipReason, number>>;
}

/** The last recovery sweep on this node: when, and its result or error. */
export interface LastSweep {
  at: Date;
  result: SweepResult | null;
  error: string | null;
}
