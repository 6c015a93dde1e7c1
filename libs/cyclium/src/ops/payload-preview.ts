/** How much of a payload a list shows: enough to recognise it, never megabytes per row. */
export const PREVIEW_CHARS = 200;

/** A payload as a list shows it: its JSON's first PREVIEW_CHARS characters and its size. */
export interface PayloadPreview {
  payloadPreview: string;
  /** The length of its JSON text (characters). */
  payloadChars: number;
}

export function previewOf(payload: unknown): PayloadPreview {
  const json = JSON.stringify(payload ?? null) ?? 'null';
  return {
    payloadPreview: json.length > PREVIEW_CHARS ? `${json.slice(0, PREVIEW_CHARS - 1)}…` : json,
    payloadChars: json.length,
  };
}

/**
 * A row of a list route with its trigger's payload replaced by a preview: the page polls lists
 * every 2 s, and up to 500 rows of 1 MiB payloads each would be half a gigabyte a call. The detail
 * route keeps the payload whole.
 */
export function withPayloadPreview<R extends { triggerRef: unknown }>(row: R): R {
  const ref = row.triggerRef;
  if (!ref || typeof ref !== 'object' || !('payload' in ref)) return row;
  const { payload, ...rest } = ref as Record<string, unknown>;
  return { ...row, triggerRef: { ...rest, ...previewOf(payload) } };
}
