import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { startBusNode } from './support/bus-node.js';
import { useDatabase } from './support/database.js';
import { post } from './support/demo-cluster.js';
import type { DemoNode } from './support/demo-node.js';
import { waitFor } from './support/wait-for.js';

/**
 * Database errors that say nothing against the event: a statement or lock timeout, a serialization
 * failure, a deadlock, a read-only server, a full disk.
 */
const CODES = ['57014', '55P03', '40001', '40P01', '25006', '53100'];
const CONSUMER = 'bus_x.on_x';

/**
 * Rule 13 at the bus with a real node process: a durable trigger whose dispatch meets a database
 * error that is not its own fault holds its event (the position stays before it) and retries, across
 * a restart too, until the error clears; only an event whose own data breaks a constraint is skipped,
 * with the reason on its position row, and the channel goes on. The faults come from a trigger on
 * cyclium_episodes that raises the event's `code` while `test_fault.held` says so, counting each
 * attempt in a sequence (a sequence is not rolled back with the failed insert).
 */
describe('durable triggers meeting database errors', () => {
  const database = useDatabase();
  const nodes: DemoNode[] = [];

  const boot = async () => {
    const node = await startBusNode(database.url, 'faults', 'x');
    nodes.push(node);
    return node;
  };
  const holdFaults = (held: boolean) =>
    database.db.query(`UPDATE test_fault SET held = $1`, [held]);
  const publish = (node: DemoNode, eventId: string, payload: Record<string, unknown>) =>
    post(node, '/events', { type: 'test.x', eventId, payload: { n: 1, ...payload } });

  async function attempts(code: string): Promise<number> {
    const { rows } = await database.db.query(
      `SELECT last_value, is_called FROM test_fault_${code.toLowerCase()}`,
    );
    return rows[0].is_called ? Number(rows[0].last_value) : 0;
  }

  async function attemptsOf(): Promise<Map<string, number>> {
    return new Map(
      await Promise.all(CODES.map(async (code) => [code, await attempts(code)] as const)),
    );
  }

  /** Waits until the dispatch of each code's event failed `more` more times than in `since`. */
  async function failedAgain(since: Map<string, number>, more: number): Promise<void> {
    for (const code of CODES) {
      const from = since.get(code) ?? 0;
      const failed = async () => (await attempts(code)) >= from + more;
      await waitFor(`${more} more failed dispatch(es) of the ${code} event`, failed, 20_000);
    }
  }

  async function episodesOf(prefix: string): Promise<Map<string, number>> {
    const { rows } = await database.db.query<{ event_id: string; n: number }>(
      `SELECT trigger_ref->>'eventId' AS event_id, count(*)::int AS n FROM cyclium_episodes
        WHERE actor_id = 'bus_x' AND starts_with(trigger_ref->>'eventId', $1) GROUP BY 1`,
      [prefix],
    );
    return new Map(rows.map((r) => [r.event_id, r.n]));
  }

  async function allOnce(prefix: string): Promise<void> {
    const ids = CODES.map((code) => `${prefix}${code}`);
    const ran = async () => (await episodesOf(prefix)).size >= ids.length;
    await waitFor(`one episode for each of the ${prefix} events`, ran, 20_000);
    const byEvent = await episodesOf(prefix);
    expect(ids.map((id) => byEvent.get(id) ?? 0)).toEqual(ids.map(() => 1));
  }

  async function position(): Promise<{ skipped: number; last_skip: string | null }> {
    const sql = `SELECT skipped::int AS skipped, last_skip FROM cyclium_bus_positions WHERE consumer = $1`;
    return (await database.db.query(sql, [CONSUMER])).rows[0];
  }

  beforeAll(async () => {
    await database.db.query(`
      CREATE TABLE test_fault (held boolean NOT NULL);
      INSERT INTO test_fault VALUES (false);
      ${CODES.map((code) => `CREATE SEQUENCE test_fault_${code.toLowerCase()};`).join('\n')}
      CREATE FUNCTION test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE code text := NEW.trigger_ref->'payload'->>'code';
      BEGIN
        IF code IS NOT NULL AND (SELECT held FROM test_fault) THEN
          PERFORM nextval('test_fault_' || lower(code));
          RAISE EXCEPTION 'injected fault %', code USING ERRCODE = code;
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER test_fault BEFORE INSERT ON cyclium_episodes FOR EACH ROW EXECUTE FUNCTION test_fault();`);
    await boot();
  });

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('holds an event meeting a database error not its own, retries, runs it once it clears', async () => {
    const node = nodes[nodes.length - 1] as DemoNode;
    await holdFaults(true);
    const before = await attemptsOf();
    for (const code of CODES) await publish(node, `held-${code}`, { code });
    // Tried again after the first failure: held, not skipped.
    await failedAgain(before, 2);
    expect((await episodesOf('held-')).size).toBe(0);
    expect((await position()).skipped).toBe(0);

    await holdFaults(false);
    await allOnce('held-');
    expect((await position()).skipped).toBe(0);
  });

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`keeps such an event across a ${signal} restart of its node, runs it once the error clears`, async () => {
      const node = nodes[nodes.length - 1] as DemoNode;
      await holdFaults(true);
      const prefix = `restart-${signal}-`;
      const before = await attemptsOf();
      for (const code of CODES) await publish(node, `${prefix}${code}`, { code });
      await failedAgain(before, 1);
      await node.stop(signal);

      const restarted = await attemptsOf();
      await boot();
      // The restarted node replays the held events from the stored position, and meets the error again.
      await failedAgain(restarted, 1);
      expect((await episodesOf(prefix)).size).toBe(0);
      await holdFaults(false);
      await allOnce(prefix);
      expect((await position()).skipped).toBe(0);
    });
  }

  it('skips an event whose own data breaks a constraint, records why, and dispatches the events after it', async () => {
    const node = nodes[nodes.length - 1] as DemoNode;
    await database.db.query(`ALTER TABLE cyclium_episodes ADD CONSTRAINT test_no_poison
                               CHECK (trigger_ref->'payload'->>'poison' IS NULL) NOT VALID`);
    await publish(node, 'poison-1', { poison: true });
    await publish(node, 'after-poison-1', {});
    const after = async () => (await episodesOf('after-poison-')).get('after-poison-1') === 1;
    await waitFor('the event after the poisoned one to run', after, 20_000);
    expect((await episodesOf('poison-')).size).toBe(0);
    // The skip is stored with the position, which may land after the next event ran.
    await waitFor('the skip to be stored with the position', async () => {
      const stored = await position();
      return stored.skipped > 0 ? stored : null;
    });
    const { skipped, last_skip } = await position();
    expect(skipped).toBe(1);
    expect(last_skip).toContain('poison-1');
    expect(last_skip).toContain('test_no_poison');
  });
});
