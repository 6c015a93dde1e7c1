import type { CycliumOutput, OutputStatus } from '../entities/output.entity.js';

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
    attempts: row.attempts as number,
    nextAttemptAt: row.next_attempt_at as Date,
    leaseOwner: row.lease_owner as string | null,
  };
}
