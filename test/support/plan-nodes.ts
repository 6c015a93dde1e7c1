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
