/**
 * The expectations a node runs, by actor: `{ actor: [expectation, …] }`. During a rolling deploy a
 * node may host an actor without one of its expectations (a release that added or dropped it);
 * what only a node with the expectation can run (a wake-up, a restart, a queued row) is left to
 * one. Sent to a statement as one jsonb parameter (see hostsExpectation).
 */
export type HostedExpectations = Readonly<Record<string, readonly string[]>>;

/** The parameter value hostsExpectation reads. */
export function hostedParam(hosted: HostedExpectations): string {
  return JSON.stringify(hosted);
}

/**
 * SQL: whether the row's `actor` and `expectation` (columns) are among `param` (a jsonb
 * HostedExpectations, see hostedParam); false, never NULL, for an actor not listed.
 */
export function hostsExpectation(actor: string, expectation: string, param: string): string {
  return `coalesce((${param}::jsonb -> ${actor}) ? ${expectation}, false)`;
}
