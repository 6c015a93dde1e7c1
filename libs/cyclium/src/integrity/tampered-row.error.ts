/**
 * A row that decides what runs next failed its signature (the `integrity` option): someone wrote it
 * without the key, edited it, or copied it from another episode. Its episode or request fails with
 * `error_class: 'tampered'`; nothing in the row is acted on.
 */
export class TamperedRowError extends Error {
  override readonly name = 'TamperedRowError';
  readonly errorClass = 'tampered';

  constructor(
    readonly table: string,
    readonly row: string,
  ) {
    super(
      `${table} row ${row} is not signed by this deployment's integrity key (edited, copied or ` +
        `forged): not acted on`,
    );
  }
}
