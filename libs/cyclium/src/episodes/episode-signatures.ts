import { Injectable } from '@nestjs/common';
import { RowSigner } from '../integrity/row-signer.service.js';
import type { EpisodeRow } from './episode-context.interface.js';
import type { EpisodeInsert } from './episode-inserts.js';

/**
 * An episode in flight (not ended), aliased `e`: the cut-over signs it, its checkpoints and its
 * requests.
 */
export const IN_FLIGHT = (e: string) =>
  `${e}.status IN ('queued', 'throttled', 'deferred', 'waiting', 'running', 'blocked')`;

/** What runs (actor, expectation, trigger), where (stack, env), and how often it may run again. */
type What = 'actorId' | 'expectationId' | 'triggerType' | 'triggerRef';
type Runs = 'sourceStack' | 'sourceEnv' | 'attempts' | 'maxAttempts';

/** The columns of an episode row that decide what runs, and how often it may run again. */
export type SignedEpisode = Pick<EpisodeRow, 'id' | What | Runs>;

/**
 * What an episode's signature covers: the row's id binds it, so a signature copied to another row
 * fails.
 */
function episodeFields(e: SignedEpisode): unknown[] {
  const what = [e.actorId, e.expectationId, e.triggerType, e.triggerRef];
  return [e.id, ...what, e.sourceStack, e.sourceEnv, e.attempts, e.maxAttempts];
}

/**
 * Signs and checks episode rows (the `integrity` option): the actor, expectation and trigger that
 * say what runs, its stack and env, and its attempts and their limit, which decide whether
 * recovery restarts it. A row is signed in the values of the statement that inserts it (no
 * statement of its own), re-signed where the library changes one of those columns (a takeover
 * counts an attempt; an operator's retry resets the count), and checked in memory on the row a
 * take returned, before its method runs. Without the option nothing is signed and every row passes.
 */
@Injectable()
export class EpisodeSignatures {
  constructor(private readonly signer: RowSigner) {}

  get enabled(): boolean {
    return this.signer.enabled;
  }

  /** The signature of an episode with these columns; null without the option. */
  sign(episode: SignedEpisode): string | null {
    return this.signer.sign('episode', episodeFields(episode));
  }

  /** An insert's row with its signature: attempts start at 0, the trigger as jsonb will hold it. */
  signed(row: EpisodeInsert): EpisodeInsert {
    if (!this.signer.enabled) return row;
    const triggerRef = JSON.parse(row.triggerRef) as EpisodeRow['triggerRef'];
    return { ...row, signature: this.sign({ ...row, triggerRef, attempts: 0 }) };
  }

  /** RowSigner.mayBeSignedSince, for an episode row refused. */
  mayBeSignedSince(episode: Pick<EpisodeRow, 'signature'>): boolean {
    return this.signer.mayBeSignedSince(episode.signature);
  }

  /**
   * Whether the row may run: it verifies, or it is unsigned before the cut-over
   * (RowSigner.accepts).
   */
  accepts(episode: SignedEpisode & Pick<EpisodeRow, 'signature'>): boolean {
    return this.signer.accepts('episode', episodeFields(episode), episode.signature);
  }
}
