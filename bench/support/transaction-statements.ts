import pg from 'pg';

/** What the committed transactions that touched one table sent, counted at the driver. */
export interface TransactionStatements {
  /** Committed transactions that sent a statement naming the table. */
  transactions: number;
  /** Every statement they sent, their START TRANSACTION and COMMIT included. */
  statements: number;
  /** Of those, the ones naming the table (the host's own writes). */
  host: number;
}

const watched = new Map<string, TransactionStatements>();
/** The statements of the transaction open on each client, by the order they were sent. */
const open = new WeakMap<pg.Client, string[]>();
let patched = false;

const textOf = (first: unknown): string =>
  typeof first === 'string'
    ? first
    : typeof first === 'object' && first !== null && 'text' in first
      ? String((first as { text: unknown }).text)
      : '';

/**
 * Counts, at `pg.Client.query` (one call is one round trip), the statements of every transaction
 * that names one of `tables`: from its START TRANSACTION or BEGIN to its COMMIT, on the client
 * that sent them. The host's own statements are the ones naming the table; the rest, less BEGIN
 * and COMMIT, are what the library added to the transaction.
 */
export function watchTransactions(tables: string[]): void {
  for (const table of tables) watched.set(table, { transactions: 0, statements: 0, host: 0 });
  if (patched) return;
  patched = true;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called below with apply(this)
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const text = textOf(args[0]).trim();
    if (/^(START TRANSACTION|BEGIN)\b/i.test(text)) open.set(this, [text]);
    else {
      const sent = open.get(this);
      if (sent) {
        sent.push(text);
        if (/^(COMMIT|ROLLBACK|END)\b/i.test(text)) {
          open.delete(this);
          if (/^(COMMIT|END)\b/i.test(text)) count(sent);
        }
      }
    }
    return original.apply(this, args);
  } as typeof pg.Client.prototype.query;
}

function count(sent: string[]): void {
  for (const [table, counted] of watched) {
    const host = sent.filter((text) => text.includes(table)).length;
    if (host === 0) continue;
    counted.transactions++;
    counted.statements += sent.length;
    counted.host += host;
  }
}

/** The counts for `table` since the last call, and starts over. */
export function takeTransactionStatements(table: string): TransactionStatements {
  const counted = watched.get(table) ?? { transactions: 0, statements: 0, host: 0 };
  watched.set(table, { transactions: 0, statements: 0, host: 0 });
  return counted;
}
