/** Polls `probe` until it returns a truthy value, or fails with `what` once `timeoutMs` has passed. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T> | T,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(
        // eslint-disable-next-line @typescript-eslint/no-base-to-string -- whatever the probe threw, as String() shows it
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
