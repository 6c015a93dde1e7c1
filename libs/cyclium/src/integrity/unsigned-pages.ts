/** A stack and env whose unsigned rows in flight are signed at the cut-over (IntegrityCutover). */
export interface CutoverScope {
  stack: string | null;
  env: string | null;
}

/** Rows per read of unsigned rows at the cut-over. */
const PAGE = 1_000;

/**
 * Signs unsigned rows page by page, each room with its own statements: `read` the page after the
 * last row of the one before (null at first), keyed and ordered as its statement says, and `write`
 * its signatures; until a page comes back short. Returns how many rows it signed.
 */
export async function signInPages<R>(
  read: (after: R | null, limit: number) => Promise<R[]>,
  write: (page: R[]) => Promise<unknown>,
): Promise<number> {
  let signed = 0;
  let after: R | null = null;
  for (;;) {
    const page = await read(after, PAGE);
    if (page.length > 0) await write(page);
    signed += page.length;
    if (page.length < PAGE) return signed;
    after = page[page.length - 1] as R;
  }
}
