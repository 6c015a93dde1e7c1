import type { SqlExecutor } from '../sql/sql-executor.js';

/**
 * One catalog fact per migration, each something only that migration creates, so a partly migrated
 * database names the first migration it still lacks. `to_regclass` follows the search_path, as
 * every other Cyclium statement does.
 */
/**
 * SQL that holds when `table` has the column `column` (both the library's own names, never input).
 */
function columnExists(table: string, column: string): string {
  return (
    `EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('${table}') AND ` +
    `attname = '${column}' AND NOT attisdropped)`
  );
}

const PROBES: ReadonlyArray<{ migration: string; missing: string; holds: string }> = [
  {
    migration: 'CycliumSchema1764400000000',
    missing: 'table cyclium_episodes',
    holds: `to_regclass('cyclium_episodes') IS NOT NULL`,
  },
  {
    // The next migration replaces this table with cyclium_events.
    migration: 'CycliumBusPayloads1764400000001',
    missing: 'table cyclium_bus_payloads',
    holds:
      `(to_regclass('cyclium_bus_payloads') IS NOT NULL OR to_regclass('cyclium_events') IS ` +
      `NOT NULL)`,
  },
  {
    migration: 'CycliumEvents1764400000002',
    missing: 'table cyclium_events',
    holds: `to_regclass('cyclium_events') IS NOT NULL`,
  },
  {
    migration: 'CycliumEpisodeQueue1764400000003',
    missing: 'index cyclium_episodes_queue',
    holds: `to_regclass('cyclium_episodes_queue') IS NOT NULL`,
  },
  {
    migration: 'CycliumTriggerOnly1764400000004',
    missing: `the 'deferred' episode status`,
    holds: `EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass('cyclium_episodes')
              AND conname = 'cyclium_episodes_status_check'
              AND pg_get_constraintdef(oid) LIKE '%deferred%')`,
  },
  {
    migration: 'CycliumWorkflows1764400000005',
    missing: 'index cyclium_workflow_instances_live_subject',
    holds: `to_regclass('cyclium_workflow_instances_live_subject') IS NOT NULL`,
  },
  {
    migration: 'CycliumNodeActors1764400000006',
    missing: 'column cyclium_nodes.actors',
    holds: columnExists('cyclium_nodes', 'actors'),
  },
  {
    migration: 'CycliumBusPositions1764400000007',
    missing: 'table cyclium_bus_positions',
    holds: `to_regclass('cyclium_bus_positions') IS NOT NULL`,
  },
  {
    migration: 'CycliumOutputOutbox1764400000008',
    missing: 'index cyclium_outputs_due',
    holds: `to_regclass('cyclium_outputs_due') IS NOT NULL`,
  },
  {
    migration: 'CycliumNodeBootId1764400000009',
    missing: 'column cyclium_nodes.boot_id',
    holds: columnExists('cyclium_nodes', 'boot_id'),
  },
  {
    migration: 'CycliumScopedRows1764400000010',
    missing: 'table cyclium_actor_scopes',
    holds: `to_regclass('cyclium_actor_scopes') IS NOT NULL`,
  },
  {
    migration: 'CycliumRowSignatures1764400000011',
    missing: 'column cyclium_nodes.signature',
    holds: columnExists('cyclium_nodes', 'signature'),
  },
  {
    migration: 'CycliumOperatorReads1764400000012',
    missing: 'index cyclium_episodes_finished',
    holds: `to_regclass('cyclium_episodes_finished') IS NOT NULL`,
  },
  {
    migration: 'CycliumRetention1764400000013',
    missing: 'index cyclium_episodes_archived',
    holds: `to_regclass('cyclium_episodes_archived') IS NOT NULL`,
  },
  {
    migration: 'CycliumRetries1764400000014',
    missing: 'column cyclium_episodes.retries',
    holds: columnExists('cyclium_episodes', 'retries'),
  },
  {
    migration: 'CycliumDueRequests1764400000015',
    missing: 'index cyclium_trigger_requests_due',
    holds: `to_regclass('cyclium_trigger_requests_due') IS NOT NULL`,
  },
  {
    migration: 'CycliumBusPositionTypes1764400000019',
    missing: 'column cyclium_bus_positions.type',
    holds: columnExists('cyclium_bus_positions', 'type'),
  },
  {
    migration: 'CycliumEpisodeSignatures1764400000020',
    missing: 'table cyclium_integrity_cutovers',
    holds: `to_regclass('cyclium_integrity_cutovers') IS NOT NULL`,
  },
  {
    migration: 'CycliumNodeExpectations1764400000021',
    missing: 'column cyclium_nodes.expectations',
    holds: columnExists('cyclium_nodes', 'expectations'),
  },
  {
    // Its last step: the tables, columns and triggers before it are in place too.
    migration: 'CycliumWaits1764400000022',
    missing: 'index cyclium_episodes_parent',
    holds: `to_regclass('cyclium_episodes_parent') IS NOT NULL`,
  },
  {
    // Its last step: the columns, table and function before it are in place too.
    migration: 'CycliumFlowControl1764400000023',
    missing: 'index cyclium_episodes_flow_running',
    holds: `to_regclass('cyclium_episodes_flow_running') IS NOT NULL`,
  },
  {
    migration: 'CycliumVersions1764400000024',
    missing: 'column cyclium_episodes.version',
    holds: columnExists('cyclium_episodes', 'version'),
  },
  {
    migration: 'CycliumFlowRoom1764400000025',
    missing: 'function cyclium_flow_room',
    holds: `to_regproc('cyclium_flow_room') IS NOT NULL`,
  },
  {
    // Its last column: the others are in place too.
    migration: 'CycliumTraceContext1764400000026',
    missing: 'column cyclium_signals.trace_context',
    holds: columnExists('cyclium_signals', 'trace_context'),
  },
  {
    migration: 'CycliumActorPauses1764400000027',
    missing: 'table cyclium_actor_pauses',
    holds: `to_regclass('cyclium_actor_pauses') IS NOT NULL`,
  },
  {
    // Only an index: without it the recovery and status reads of a large table go unindexed.
    migration: 'CycliumUnfinishedIndex1764400000028',
    missing: 'index cyclium_episodes_unfinished',
    holds: `to_regclass('cyclium_episodes_unfinished') IS NOT NULL`,
  },
  {
    // Only an index: without it the expired-lease sweep and the status count read every claim.
    migration: 'CycliumLiveClaimsIndex1764400000029',
    missing: 'index cyclium_work_claims_live',
    holds: `to_regclass('cyclium_work_claims_live') IS NOT NULL`,
  },
  {
    // Its last step: the column and the other function are in place too.
    migration: 'CycliumLifecycleReads1764400000030',
    missing: 'function cyclium_declare_lifecycle_reads',
    holds: `to_regproc('cyclium_declare_lifecycle_reads') IS NOT NULL`,
  },
  {
    // Its last step before the copy: the columns and the other trigger are in place too.
    migration: 'CycliumEpisodeClaimColumns1764400000031',
    missing: 'function cyclium_claims_mirror_episode_rows',
    holds: `to_regproc('cyclium_claims_mirror_episode_rows') IS NOT NULL`,
  },
];

const STATEMENT = `SELECT ARRAY[${PROBES.map((p) => p.holds).join(',\n')}] AS holds`;

/** The first Cyclium migration this database has not had, or undefined when it has them all. */
export async function firstMissingMigration(
  sql: SqlExecutor,
): Promise<{ migration: string; missing: string } | undefined> {
  const { rows } = await sql.query<{ holds: boolean[] }>(STATEMENT);
  const index = rows[0].holds.indexOf(false);
  return index === -1
    ? undefined
    : { migration: PROBES[index].migration, missing: PROBES[index].missing };
}
