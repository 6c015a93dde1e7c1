import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The lock that orders the terminal lifecycle events' writers against their readers' declarations,
 * keyed in the library's own namespace of the one advisory key space the database has. An end
 * holds it shared while it asks whether anyone reads its event; a node holds it exclusively while
 * it declares what it reads.
 */
const READS_LOCK = (take: string) => `${take}(hashtextextended('cyclium_lifecycle_reads', 0))`;

/**
 * Whether anything reads an episode's terminal lifecycle event of type `p_type` on `p_channel`
 * (the episode's stack and env), so an end writes the event only then: a node of that stack and
 * env seen within `p_stale_secs` that declared the type (or `*`), or one whose row holds no
 * declaration of its current boot (a node of an earlier release, one that has not declared yet,
 * or a process of an earlier release that took the identity over) and so reads every type; a
 * durable consumer's stored position for the type (or for every type: NULL, `*`), whether or not
 * its node is up. (An event wait is never one: `ep.waitForEvent` refuses the library's types.)
 *
 * Read under the shared lock, each query with a snapshot taken after it (VOLATILE, READ
 * COMMITTED): a declaration either committed before the end looked, and the end sees it, or waited
 * for the end's commit, so no end that a declared reader is owed skips its event.
 */
const READ = `
  CREATE FUNCTION cyclium_lifecycle_read(
    p_channel text, p_stack text, p_env text, p_type text, p_stale_secs double precision)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE AS $$
  BEGIN
    PERFORM ${READS_LOCK('pg_advisory_xact_lock_shared')};
    RETURN EXISTS (
             SELECT 1 FROM cyclium_nodes n
              WHERE n.stack IS NOT DISTINCT FROM p_stack AND n.env IS NOT DISTINCT FROM p_env
                AND n.last_seen_at > now() - make_interval(secs => p_stale_secs)
                AND (n.lifecycle_boot IS DISTINCT FROM n.boot_id
                     OR n.lifecycle_reads && ARRAY[p_type, '*']))
        OR EXISTS (
             SELECT 1 FROM cyclium_bus_positions p
              WHERE p.channel = p_channel AND (p.type IS NULL OR p.type IN (p_type, '*')));
  END $$`;

/**
 * Stores what node `p_node` (this boot, `p_boot`) reads of the terminal lifecycle events, under
 * the exclusive lock: it waits for the ends that already looked, and the ends after it see it.
 * False when the row is not this boot's (deregistered, or taken by a newer process).
 */
const DECLARE = `
  CREATE FUNCTION cyclium_declare_lifecycle_reads(p_node text, p_boot uuid, p_types text[])
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE AS $$
  BEGIN
    PERFORM ${READS_LOCK('pg_advisory_xact_lock')};
    UPDATE cyclium_nodes SET lifecycle_reads = p_types, lifecycle_boot = p_boot
     WHERE node_identity = p_node AND boot_id = p_boot;
    RETURN FOUND;
  END $$`;

/**
 * Lighter ends: an episode's terminal lifecycle event (`episode.completed`, `.failed`,
 * `.canceled`) is written only when something reads it. Each node declares in its row which of
 * those types its in-process handlers take, tagged with its boot id; the end asks
 * cyclium_lifecycle_read in its own statement. A node of the previous release declares nothing
 * (the tag never matches its boot id), which reads every type, so while one is live in a stack and
 * env every end there writes its event as before: the rolling upgrade needs no cut-over. Two
 * nullable columns without a default and two functions: nothing waits on the table.
 */
export class CycliumLifecycleReads1764400000030 implements MigrationInterface {
  name = 'CycliumLifecycleReads1764400000030';

  async up(runner: QueryRunner): Promise<void> {
    await runner.query(
      `ALTER TABLE cyclium_nodes ADD COLUMN lifecycle_reads text[], ADD COLUMN lifecycle_boot uuid`,
    );
    await runner.query(READ);
    await runner.query(DECLARE);
  }

  async down(runner: QueryRunner): Promise<void> {
    await runner.query(`DROP FUNCTION cyclium_declare_lifecycle_reads(text, uuid, text[])`);
    await runner.query(
      `DROP FUNCTION cyclium_lifecycle_read(text, text, text, text, double precision)`,
    );
    await runner.query(
      `ALTER TABLE cyclium_nodes DROP COLUMN lifecycle_reads, DROP COLUMN lifecycle_boot`,
    );
  }
}
