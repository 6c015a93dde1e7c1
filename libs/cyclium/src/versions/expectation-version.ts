import { VERSION_SEPARATOR } from '../sql/hosted-expectations.js';

/**
 * Versions of an expectation's code (`@Expectation({ version, accepts })`): an episode records the
 * version it started on, and only a node hosting that version, or one whose expectation accepts
 * it, resumes, retries, wakes or restarts it. An episode without one (not started yet, or started
 * on code without a version) runs on any node hosting the expectation.
 */
export interface ExpectationVersion {
  /** The version of this code, recorded on each episode it starts. */
  version?: string;
  /** Versions whose episodes this code can take over (their journals replay on it). */
  accepts?: readonly string[];
}

const MAX_LENGTH = 100;

const AT = VERSION_SEPARATOR;

function versionTextProblem(field: string, value: unknown): string | null {
  if (
    typeof value !== 'string' ||
    value === '' ||
    value.length > MAX_LENGTH ||
    value.includes(AT) ||
    value.includes('\u0000')
  )
    return (
      `${field} must be a non-empty string of at most ${MAX_LENGTH} characters without '@' or ` +
      `NUL (got ${JSON.stringify(value)})`
    );
  return null;
}

/** What is wrong with an expectation's `version` and `accepts`, or null. */
export function versionProblem(options: ExpectationVersion): string | null {
  if (options.version !== undefined) {
    const problem = versionTextProblem('version', options.version);
    if (problem) return problem;
  }
  if (options.accepts === undefined) return null;
  if (!Array.isArray(options.accepts))
    return `accepts must be an array of versions (got ${JSON.stringify(options.accepts)})`;
  for (const [i, accepted] of options.accepts.entries()) {
    const problem = versionTextProblem(`accepts[${i}]`, accepted);
    if (problem) return problem;
  }
  return null;
}

/** The versions whose episodes a node with these options runs, besides unversioned ones. */
export function runnableVersions(options: ExpectationVersion): string[] {
  return [...new Set([options.version, ...(options.accepts ?? [])])].filter(
    (v): v is string => v !== undefined,
  );
}

/** Whether code with these options may run an episode that recorded `version`. */
export function runsVersion(options: ExpectationVersion, version: string | null): boolean {
  return version === null || runnableVersions(options).includes(version);
}

/**
 * The entries a node declares for one expectation in its HostedExpectations: the expectation's id
 * (episodes without a version) and `id@version` for each version it runs.
 */
export function hostedEntries(expectationId: string, options: ExpectationVersion): string[] {
  return [expectationId, ...runnableVersions(options).map((v) => `${expectationId}${AT}${v}`)];
}
