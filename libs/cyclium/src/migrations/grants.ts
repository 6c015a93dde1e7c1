/** Every table the migrations create. */
export const CYCLIUM_TABLES = [
  'cyclium_actor_definitions',
  'cyclium_actor_scopes',
  'cyclium_bus_positions',
  'cyclium_episode_checkpoints',
  'cyclium_episode_steps',
  'cyclium_episodes',
  'cyclium_events',
  'cyclium_findings',
  'cyclium_integrity_cutovers',
  'cyclium_nodes',
  'cyclium_outputs',
  'cyclium_trigger_requests',
  'cyclium_work_claims',
  'cyclium_workflow_instances',
] as const;

/** The roles to grant to; each one left out gets nothing. Names are SQL identifiers, quoted as given. */
export interface CycliumRoles {
  /** A node that runs episodes (any mode): reads and writes every Cyclium table, deletes its retention. */
  worker?: string;
  /** A service that only publishes bus events: inserts them (and reads them back, to tell a retried id from a conflict). */
  publisher?: string;
  /** An operator's read-only view: reads every table. */
  reader?: string;
}

/**
 * The least privilege each kind of Cyclium client needs, as GRANT statements to run as the tables'
 * owner (after the migrations, in a migration of the host's own, say). NOTIFY needs no grant, and
 * LISTEN none either. A publisher gets nothing that decides what runs next: it cannot write an
 * episode, a checkpoint, a trigger request, a claim or a node row; with the `integrity` option an
 * event it inserts of a library type (`cyclium.*`, `episode.*`) is also ignored, being unsigned.
 */
export function cycliumGrants(roles: CycliumRoles): string[] {
  const statements: string[] = [];
  const all = CYCLIUM_TABLES.join(', ');
  if (roles.worker) statements.push(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${all} TO ${quoted(roles.worker)}`);
  if (roles.publisher) statements.push(`GRANT SELECT, INSERT ON cyclium_events TO ${quoted(roles.publisher)}`);
  if (roles.reader) statements.push(`GRANT SELECT ON ${all} TO ${quoted(roles.reader)}`);
  return statements;
}

function quoted(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}
