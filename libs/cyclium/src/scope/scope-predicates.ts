/**
 * The stack and env predicates of every statement, one spelling per meaning. Each renders a SQL
 * condition on `column` (a row's stack or env) against `value`: a parameter placeholder such as
 * `$2` or `$2::text`, or another row's column. NULL is the default stack and env, a value like any
 * other: a predicate that forgets it strands the default's rows silently, so each one says what
 * NULL does. Where an index decides the spelling, the function keeps the index's.
 */

/**
 * Same env, NULL (the default env) equal to NULL: envs never mix, and the default is an env like
 * the others.
 */
export function sameEnv(column: string, value: string): string {
  return `${column} IS NOT DISTINCT FROM ${value}`;
}

/**
 * Same stack, NULL (the single-stack default) equal to NULL: a row of another stack, or of none
 * when the node has one, is not the node's.
 */
export function sameStack(column: string, value: string): string {
  return `${column} IS NOT DISTINCT FROM ${value}`;
}

/**
 * sameEnv in the two shapes that can use an index on the env column, such as trigger requests'
 * (status, source_env, inserted_at): `IS NOT DISTINCT FROM` cannot. The env is known when the
 * statement is written, so it picks the shape; `param` is still sent, and `param::text IS NULL`
 * gives it a type when it is NULL.
 */
export function sameEnvIndexed(column: string, param: string, env: string | null): string {
  return env === null ? `${column} IS NULL AND ${param}::text IS NULL` : `${column} = ${param}`;
}

/**
 * Same stack or env as a unique expression index over `coalesce(column, '')` compares them (the
 * one live workflow instance per subject): the planner matches the expression only as spelled
 * there. NULL equals NULL; it would equal '' too, but an empty slug is never stored (the options
 * turn it into NULL).
 */
export function sameAsCoalesced(column: string, value: string): string {
  return `coalesce(${column}, '') = coalesce(${value}, '')`;
}

/**
 * The rows a node of stack `value` acts on: its stack's, and the rows with none (written by a
 * node without a stack); a node without a stack (NULL) acts on every stack's. Symmetric, so it
 * also says whether a node's stack and a row's overlap when `value` is the node's column.
 */
export function stackCovers(column: string, value: string): string {
  return `(${value}::text IS NULL OR ${column} = ${value} OR ${column} IS NULL)`;
}

/**
 * An operator's optional stack filter: stack `value` only, or every stack when NULL. A row with
 * no stack is not in any named stack's filter (unlike stackCovers).
 */
export function stackFilter(column: string, value: string): string {
  return `(${value}::text IS NULL OR ${column} = ${value})`;
}
