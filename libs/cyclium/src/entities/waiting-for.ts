/** A payload value `ep.waitForEvent` can match on. */
export type MatchValue = string | number | boolean | null;

/**
 * What a `waiting` episode waits for (the row's `waiting_for`): its kind and what satisfies it,
 * the journal position of the wait, the timeout it was given and its deadline (ISO, database
 * clock; null for none), and the bus channel its wake-ups are announced on.
 */
export type WaitingFor = {
  stepNo: number;
  timeoutMs?: number;
  deadline: string | null;
  channel?: string | null;
} & (
  | { kind: 'signal'; name: string }
  | { kind: 'event'; type: string; match: Record<string, MatchValue> }
  | { kind: 'children'; children: string[] }
);
