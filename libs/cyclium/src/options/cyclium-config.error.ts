/** Thrown at boot when CycliumModule options are invalid; the message names every bad field. */
export class CycliumConfigError extends Error {
  override readonly name = 'CycliumConfigError';

  constructor(readonly problems: string[]) {
    super(`Invalid CycliumModule options:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}
