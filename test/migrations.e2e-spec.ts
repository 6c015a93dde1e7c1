import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { CYCLIUM_TABLES, cycliumMigrations } from '@cyclium/nestjs/migrations';
import { PostgresClaims } from '@cyclium/nestjs/adapters';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { emptyDatabase } from './support/database.js';

/** The grants (cycliumGrants) name these: the migrations must create exactly them. */
const TABLES = [...CYCLIUM_TABLES];

describe('cycliumMigrations', () => {
  let dataSource: DataSource;

  const tables = async () =>
    (
      (await dataSource.query(
        `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_name LIKE 'cyclium_%' ORDER BY 1`,
      )) as Array<{ table_name: string }>
    ).map((r) => r.table_name);

  const indexDefinition = async (name: string) =>
    (
      (await dataSource.query(`SELECT indexdef FROM pg_indexes WHERE indexname = $1`, [
        name,
      ])) as Array<{ indexdef: string }>
    )[0]?.indexdef;

  beforeAll(async () => {
    dataSource = new DataSource({
      type: 'postgres',
      url: await emptyDatabase('migrations'),
      migrations: cycliumMigrations,
    });
    await dataSource.initialize();
  });

  afterAll(async () => {
    await dataSource?.destroy();
  });

  it('creates every table and guarantee-carrying index on an empty database', async () => {
    expect(await tables()).toEqual([]);
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    expect(applied.map((m) => m.name)).toEqual(cycliumMigrations.map((m) => new m().name));
    expect(await tables()).toEqual(TABLES);

    expect(await indexDefinition('cyclium_episodes_dedupe_key_live')).toMatch(
      /UNIQUE INDEX .* \(dedupe_key\) WHERE \(\(dedupe_key IS NOT NULL\) AND \(archived_at IS NULL\)\)/,
    );
    expect(await indexDefinition('cyclium_findings_active_key_env')).toMatch(
      /UNIQUE INDEX .* \(finding_key, env\) NULLS NOT DISTINCT WHERE \(status = 'active'::text\)/,
    );
    // A renewal changes no indexed column (a HOT update), a finish leaves the index.
    expect(await indexDefinition('cyclium_work_claims_live')).toMatch(
      /\(owner_node\) WHERE \(state = 'claimed'::text\)/,
    );
    expect(await indexDefinition('cyclium_work_claims_state_lease')).toBeUndefined();
    const [claims] = (await dataSource.query(
      `SELECT reloptions FROM pg_class WHERE relname = 'cyclium_work_claims'`,
    )) as Array<{ reloptions: string[] | null }>;
    expect(claims?.reloptions).toEqual(['fillfactor=80']);
    expect(await indexDefinition('cyclium_trigger_requests_status_env')).toMatch(
      /\(status, source_env, inserted_at\)/,
    );
    expect(await indexDefinition('cyclium_events_channel_tx')).toMatch(/\(channel, tx_id, id\)/);
    expect(await indexDefinition('cyclium_events_channel_event_id')).toMatch(
      /UNIQUE INDEX .* \(channel, event_id\)/,
    );
  });

  it('renews a held lease as a HOT update: no index entry per renewal', async () => {
    const url = (dataSource.options as { url: string }).url;
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    try {
      const claims = new PostgresClaims(client);
      const held = [];
      for (const key of ['hot:1', 'hot:2', 'hot:3']) {
        const taken = await claims.acquire(key, 'node-h', { leaseSeconds: 60 });
        if (taken.status !== 'acquired') throw new Error(`${key} was ${taken.status}`);
        held.push({ key, fence: taken.claim.fence });
      }
      const counted = `SELECT pg_stat_get_xact_tuples_updated(c.oid)::int AS updated,
                              pg_stat_get_xact_tuples_hot_updated(c.oid)::int AS hot
                         FROM pg_class c WHERE c.relname = 'cyclium_work_claims'`;
      await client.query('BEGIN');
      expect(await claims.renewMany('node-h', held, 60)).toHaveLength(3);
      expect((await client.query(counted)).rows[0]).toEqual({ updated: 3, hot: 3 });
      await client.query('COMMIT');
    } finally {
      await client.end();
    }
  });

  it("reads an episode's row by its indexes on every claim write, however many episodes there are", async () => {
    const url = (dataSource.options as { url: string }).url;
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => undefined);
    await client.connect();
    const insert = (n: number, tag: string) =>
      client.query(
        `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref,
                                       dedupe_key, status)
         SELECT 'a', 'x', 'manual', '{}', CASE WHEN i % 2 = 0 THEN '${tag}:' || i END, 'running'
           FROM generate_series(1, $1::int) i`,
        [n],
      );
    const claims = new PostgresClaims(client);
    /** The keys of `n` episodes of each key shape, not claimed yet. */
    const unclaimed = async (n: number) =>
      (
        await client.query<{ key: string }>(
          `(SELECT 'episode:' || id AS key FROM cyclium_episodes
             WHERE dedupe_key IS NULL AND claim_fence IS NULL LIMIT $1)
           UNION ALL (SELECT dedupe_key FROM cyclium_episodes
                       WHERE dedupe_key IS NOT NULL AND claim_fence IS NULL LIMIT $1)`,
          [n],
        )
      ).rows.map((row) => row.key);
    /** Takes, renews and finishes each key's claim. */
    const claim = async (keys: string[]) => {
      for (const key of keys) {
        const taken = await claims.acquire(key, 'node-s', { leaseSeconds: 60 });
        if (taken.status !== 'acquired') throw new Error(`${key} was ${taken.status}`);
        expect(await claims.renew(key, 'node-s', 60, taken.claim.fence)).toBe('ok');
        expect(await claims.complete(key, 'node-s', taken.claim.fence)).toBe('ok');
      }
    };
    // This backend's scans so far: those it has reported and those it has not yet. Either alone
    // can move between two reads (it reports when idle, about once a second), the sum cannot.
    const scans = async () =>
      (
        await client.query(
          `SELECT (pg_stat_get_numscans('cyclium_episodes'::regclass)
                   + pg_stat_get_xact_numscans('cyclium_episodes'::regclass))::int AS seq`,
        )
      ).rows[0] as { seq: number };
    try {
      // The triggers' statements are planned while the table is small, as on a new database, and
      // run often enough to be kept as generic plans (after five custom ones); then the table
      // grows with no new statistics. A lookup that only a custom plan turns into an index
      // condition would now scan the whole table on every claim write.
      await insert(32, 'small');
      await claim(await unclaimed(8));
      await insert(20_000, 'large');
      const keys = await unclaimed(16);
      const before = await scans();
      await claim(keys);
      expect(await scans()).toEqual(before);
    } finally {
      await client.end();
    }
  });

  it('reverts cleanly, leaving no cyclium table behind, and applies again', async () => {
    for (let i = 0; i < cycliumMigrations.length; i++)
      await dataSource.undoLastMigration({ transaction: 'each' });
    expect(await tables()).toEqual([]);
    expect(await dataSource.showMigrations()).toBe(true);

    await dataSource.runMigrations({ transaction: 'each' });
    expect(await tables()).toEqual(TABLES);
    expect(await dataSource.showMigrations()).toBe(false);
  });
});

describe('cycliumEntities', () => {
  it('has an entity for every table the migrations create, and TypeORM accepts them', async () => {
    const { cycliumEntities } = await import('@cyclium/nestjs/entities');
    const dataSource = new DataSource({
      type: 'postgres',
      url: await emptyDatabase('entities'),
      entities: [...cycliumEntities],
    });
    await dataSource.initialize();
    try {
      const tables = dataSource.entityMetadatas.map((m) => m.tableName).sort();
      expect(tables).toEqual(TABLES);
    } finally {
      await dataSource.destroy();
    }
  });
});

describe('the episode claim columns (migration 31) on a database with claims in flight', () => {
  it("copies each unfinished episode's claim into its row, and mirrors every claim write from then on", async () => {
    const url = await emptyDatabase('claim_columns');
    const before = cycliumMigrations.findIndex(
      (m) => new m().name === 'CycliumEpisodeClaimColumns1764400000031',
    );
    const open = async (migrations: typeof cycliumMigrations) => {
      const source = new DataSource({ type: 'postgres', url, migrations });
      await source.initialize();
      await source.runMigrations({ transaction: 'each' });
      return source;
    };
    const episode = (id: string, status: string, dedupe: string | null) =>
      `INSERT INTO cyclium_episodes (id, actor_id, expectation_id, trigger_type, trigger_ref,
                                     dedupe_key, status, max_attempts)
       VALUES ('${id}', 'a', 'x', 'manual', '{}', ${dedupe === null ? 'NULL' : `'${dedupe}'`},
               '${status}', 1)`;
    const claim = (key: string, state: string, fence: number) =>
      `INSERT INTO cyclium_work_claims (dedupe_key, state, owner_node, lease_until, claimed_at,
                                        last_heartbeat_at, attempt, fence)
       VALUES ('${key}', '${state}', 'old-node', now() + interval '1 minute', now(), now(), 2, ${fence})`;
    const running = '00000000-0000-4000-8000-000000000001';
    const deduped = '00000000-0000-4000-8000-000000000002';
    const done = '00000000-0000-4000-8000-000000000003';

    const previous = await open(cycliumMigrations.slice(0, before));
    try {
      await previous.query(episode(running, 'running', null));
      await previous.query(claim(`episode:${running}`, 'claimed', 3));
      await previous.query(episode(deduped, 'running', 'scoped:key'));
      await previous.query(claim('scoped:key', 'claimed', 7));
      await previous.query(episode(done, 'done', null));
      await previous.query(claim(`episode:${done}`, 'done', 1));
    } finally {
      await previous.destroy();
    }

    const migrated = await open(cycliumMigrations);
    try {
      const rows = async () =>
        (await migrated.query(
          `SELECT id, claim_owner AS owner, claim_fence::int AS fence, claim_state AS state,
                  claim_attempt AS attempt
             FROM cyclium_episodes ORDER BY id`,
        )) as Array<Record<string, unknown>>;
      expect(await rows()).toEqual([
        { id: running, owner: 'old-node', fence: 3, state: 'claimed', attempt: 2 },
        { id: deduped, owner: 'old-node', fence: 7, state: 'claimed', attempt: 2 },
        // An ended episode's claim is history: nothing will take it again.
        { id: done, owner: null, fence: null, state: null, attempt: null },
      ]);
      // A previous release's node finishing its claim after the migration: the row follows.
      await migrated.query(
        `UPDATE cyclium_work_claims SET state = 'done', finished_at = now()
          WHERE dedupe_key = 'scoped:key' AND owner_node = 'old-node' AND fence = 7`,
      );
      expect((await rows())[1]).toMatchObject({ owner: 'old-node', fence: 7, state: 'done' });
    } finally {
      await migrated.destroy();
    }
  });
});
