import { createHash } from 'node:crypto';

/** Every table the migrations create. */
export const CYCLIUM_TABLES = [
  'cyclium_actor_definitions',
  'cyclium_actor_pauses',
  'cyclium_actor_scopes',
  'cyclium_bus_positions',
  'cyclium_episode_checkpoints',
  'cyclium_episode_steps',
  'cyclium_episodes',
  'cyclium_event_wait_shapes',
  'cyclium_event_waits',
  'cyclium_events',
  'cyclium_findings',
  'cyclium_flow_starts',
  'cyclium_integrity_cutovers',
  'cyclium_nodes',
  'cyclium_outputs',
  'cyclium_signals',
  'cyclium_trigger_requests',
  'cyclium_work_claims',
  'cyclium_workflow_instances',
] as const;

/** A publisher role and the one stack and env (one bus channel) it publishes to and reads. */
export interface CycliumPublisher {
  role: string;
  /** Unset, null or '': no stack, as a node without `stackSlug`. */
  stackSlug?: string | null;
  /** Unset, null or '': the default env. */
  env?: string | null;
}

/**
 * The roles to grant to; each one left out gets nothing. Names are SQL identifiers, quoted as
 * given.
 */
export interface CycliumRoles {
  /**
   * A node that runs episodes (any mode): reads and writes every Cyclium table, deletes its
   * retention.
   */
  worker?: string;
  /**
   * A service that only publishes bus events, to one stack and env: a role name alone is the
   * default channel (no stack, the default env). It inserts events there (the columns it may set
   * only), and reads that channel's events back (to tell a retried id from a conflict).
   */
  publisher?: string | CycliumPublisher;
  /** An operator's read-only view: reads every table. */
  reader?: string;
}

/** What a publisher may set; the rest (`id`, `tx_id`, `created_at`) only the database stamps. */
const PUBLISHER_COLUMNS = `channel, event_id, type, payload, published_at, publisher, source_stack,
source_env,
  signature, trace_context`;

/**
 * The least privilege each kind of Cyclium client needs, as statements to run as the tables' owner
 * (after the migrations, in a migration of the host's own, say), again after a change. NOTIFY needs
 * no grant, and LISTEN none either. A publisher gets nothing that decides what runs next: it cannot
 * write an episode, a checkpoint, a trigger request, a claim or a node row; with the `integrity`
 * option an event it inserts of a library type (`cyclium.*`, `episode.*`) is also ignored, being
 * unsigned. Its events are its own channel's only: row-level security on cyclium_events (a policy
 * that lets every other role do as its grants say, and a restrictive one for the publisher) keeps
 * its inserts and reads to its stack and env, and column grants leave the row's id, transaction id
 * and stored time to the database.
 */
export function cycliumGrants(roles: CycliumRoles): string[] {
  const statements: string[] = [];
  const all = CYCLIUM_TABLES.join(', ');
  if (roles.worker)
    statements.push(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${all} TO ${quoted(roles.worker)}`);
  const publisher =
    typeof roles.publisher === 'string' ? { role: roles.publisher } : roles.publisher;
  if (publisher) statements.push(...publisherGrants(publisher));
  if (roles.reader) statements.push(`GRANT SELECT ON ${all} TO ${quoted(roles.reader)}`);
  return statements;
}

function publisherGrants(publisher: CycliumPublisher): string[] {
  const role = quoted(publisher.role);
  const stack = literal(publisher.stackSlug || null);
  const env = literal(publisher.env || null);
  const channel = channelOf(stack, env);
  // Hashed: a policy name is cut at 63 bytes, and two long role names must not share one.
  const roleHash = createHash('sha256').update(publisher.role).digest('hex').slice(0, 16);
  const policy = quoted(`cyclium_events_publisher_${roleHash}`);
  return [
    // A grant of a previous release (the whole table) would outlive the narrower one.
    `REVOKE ALL ON cyclium_events FROM ${role}`,
    `GRANT SELECT ON cyclium_events TO ${role}`,
    `GRANT INSERT (${PUBLISHER_COLUMNS}) ON cyclium_events TO ${role}`,
    // Before row-level security is on, so no role is ever left without a policy.
    `DO $$ BEGIN
       IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                         AND tablename = 'cyclium_events' AND policyname = 'cyclium_events_all')
                           THEN
         CREATE POLICY cyclium_events_all ON cyclium_events USING (true) WITH CHECK (true);
       END IF;
     END $$`,
    `ALTER TABLE cyclium_events ENABLE ROW LEVEL SECURITY`,
    `DROP POLICY IF EXISTS ${policy} ON cyclium_events`,
    `CREATE POLICY ${policy} ON cyclium_events AS RESTRICTIVE TO ${role}
       USING (channel = ${channel})
       WITH CHECK (channel = ${channel}
                   AND source_stack IS NOT DISTINCT FROM ${stack}
                   AND source_env IS NOT DISTINCT FROM ${env})`,
  ];
}

/**
 * The bus channel of a stack and env, in SQL (the same formula as busChannel, which the bus uses
 * and this room may not import): `cyclium_bus`, or `cyclium_bus_` and 16 hex digits of the SHA-256
 * of `<stack>\0<env>`.
 */
function channelOf(stack: string, env: string): string {
  if (stack === 'NULL' && env === 'NULL') return `'cyclium_bus'`;
  const bytes = `convert_to(coalesce(${stack}, ''), 'UTF8') || '\\x00'::bytea
                 || convert_to(coalesce(${env}, ''), 'UTF8')`;
  return `('cyclium_bus_' || left(encode(sha256(${bytes}), 'hex'), 16))`;
}

function quoted(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

function literal(value: string | null): string {
  return value === null ? 'NULL' : `'${value.replaceAll("'", "''")}'`;
}
