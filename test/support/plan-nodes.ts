import pg from 'pg';

/** A node of an `EXPLAIN (FORMAT JSON)` plan: the fields the plan tests read. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  /** With `BUFFERS`. */
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

/** Every node of `plan`, depth first. */
export function nodesOf<N extends { Plans?: N[] }>(plan: N): N[] {
  return [plan, ...(plan.Plans ?? []).flatMap((child) => nodesOf(child))];
}

/**
 * The generic plan of `text` (the plan a pooled connection keeps for a prepared statement),
 * prepared as `name` on `client` and explained with every parameter NULL.
 */
export async function genericPlan(
  client: pg.Client,
  name: string,
  text: string,
): Promise<PlanNode> {
  const count = Math.max(...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  await client.query('SET plan_cache_mode = force_generic_plan');
  await client.query(`PREPARE ${name} AS ${text}`);
  const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
    `EXPLAIN (FORMAT JSON) EXECUTE ${name}(${Array(count).fill('NULL').join(', ')})`,
  );
  return (rows[0]?.['QUERY PLAN'][0] as { Plan: PlanNode }).Plan;
}

type Query = (this: pg.Client, ...args: unknown[]) => unknown;

/**
 * Shows `seen` each prepared statement any pg client of this process sends (a config with a
 * name), before sending it; the function returned puts pg back.
 */
export function watchPreparedStatements(seen: (config: pg.QueryConfig) => void): () => void {
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called with each client as `this`, and put back
  const original = pg.Client.prototype.query as unknown as Query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as pg.QueryConfig | string;
    if (typeof config === 'object' && config.name) seen(config);
    return original.apply(this, args);
  } as unknown as typeof pg.Client.prototype.query;
  return () => {
    pg.Client.prototype.query = original as unknown as typeof pg.Client.prototype.query;
  };
}
