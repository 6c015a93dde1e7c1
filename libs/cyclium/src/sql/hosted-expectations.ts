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
 * Joins an expectation and a version in a hosted entry (`expectation@version`): a node lists one
 * such entry for each version it runs (see the versions folder), and no version may hold it.
 */
export const VERSION_SEPARATOR = '@';

/**
 * SQL: the entry of a HostedExpectations list an episode needs, from its `expectation` and
 * `version` (SQL expressions): the expectation alone without a version.
 */
export function neededEntry(expectation: string, version: string): string {
  return `(${expectation} || coalesce('${VERSION_SEPARATOR}' || ${version}, ''))`;
}

/**
 * SQL: whether the row's `actor` and `expectation` (columns) are among `param` (a jsonb
 * HostedExpectations, see hostedParam), at the row's `version` (an expression) when given; false,
 * never NULL, for an actor not listed.
 */
export function hostsExpectation(
  actor: string,
  expectation: string,
  param: string,
  version?: string,
): string {
  const entry = version === undefined ? expectation : neededEntry(expectation, version);
  return `coalesce((${param}::jsonb -> ${actor}) ? ${entry}, false)`;
}
