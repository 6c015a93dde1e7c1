import type { ChildProcess } from 'node:child_process';

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

/** The last 40 lines a process printed, for a failure message. */
export function outputTail(output: string): string {
  return output.split('\n').slice(-40).join('\n');
}

/**
 * Polls `probe` while `child` runs. A child that exits first fails at once, not at the deadline;
 * either failure carries the last lines the child printed, so a slow machine and a crash read apart.
 */
export async function waitWhileRunning(
  what: string,
  child: ChildProcess,
  output: () => string,
  probe: () => Promise<boolean> | boolean,
  timeoutMs: number,
  everyMs = 100,
): Promise<void> {
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  let outcome: 'held' | 'exited' | undefined;
  try {
    outcome = await waitFor(
      what,
      async () => (gone() ? 'exited' : (await probe()) ? 'held' : undefined),
      timeoutMs,
      everyMs,
    );
  } catch (error) {
    throw new Error(`${(error as Error).message}\n--- its output:\n${outputTail(output())}`, {
      cause: error,
    });
  }
  if (outcome === 'exited')
    throw new Error(
      `exited with ${child.signalCode ?? `code ${child.exitCode}`} before ${what}\n` +
        `--- its output:\n${outputTail(output())}`,
    );
}
