import { afterAll, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Actor, Expectation, WorkClaims, type EpisodeContext } from '@cyclium/nestjs';
import { ActorRegistry } from '../libs/cyclium/src/actors/actor-registry.service.js';
import { CycliumDataSource } from '../libs/cyclium/src/database/cyclium-data-source.service.js';
import { EpisodeJournal } from '../libs/cyclium/src/episodes/episode-journal.js';
import { EpisodeRecoveryStore } from '../libs/cyclium/src/episodes/episode-recovery-store.js';
import { EpisodeRunner } from '../libs/cyclium/src/episodes/episode-runner.service.js';
import { EpisodeSignatures } from '../libs/cyclium/src/episodes/episode-signatures.js';
import { EpisodeStore } from '../libs/cyclium/src/episodes/episode-store.js';
import { RowSigner } from '../libs/cyclium/src/integrity/row-signer.service.js';
import { WorkflowInstanceStore } from '../libs/cyclium/src/workflows/workflow-instance-store.js';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

const ran: string[] = [];

@Injectable()
@Actor({ id: 'race' })
class RaceActor {
  @Expectation({ id: 'two', trigger: 'manual' })
  async two(ep: EpisodeContext): Promise<void> {
    await ep.step('first', () => ran.push(`${ep.episode.id}:first`));
    await ep.step('second', () => ran.push(`${ep.episode.id}:second`));
  }
}

/**
 * The `integrity` cut-over lands between a node's read of an unsigned row and what it does with
 * it: the row was written by a node without the option, read while unsigned rows were still
 * accepted, then the cut-over signed it in flight and this node learned of the cut-over. Judged on
 * the stale read, a genuine row would fail as `tampered` (or lose the signature the cut-over gave
 * it). The rolling switch in integrity-rollout.e2e-spec met this by chance under load; here each
 * meeting is placed by hand, with the real cut-over of a real node.
 */
describe('integrity: a cut-over between a read and its use', () => {
  const database = useDatabase();
  let app: INestApplicationContext;
  const rows = async <T = Record<string, unknown>>(sql: string, params: unknown[] = []) =>
    (await database.db.query(sql, params)).rows as T[];
  /** An episode row as a node without the option writes it: no signature. */
  const unsigned = async (owner: string) =>
    (
      await rows<{ id: string }>(
        `INSERT INTO cyclium_episodes (actor_id, expectation_id, trigger_type, trigger_ref, status,
                                       owner_node, started_at)
         VALUES ('race', 'two', 'manual', '{"type":"manual","payload":{}}', 'running', $1, now())
         RETURNING id`,
        [owner],
      )
    )[0]?.id as string;

  beforeAll(async () => {
    // A live node without the option (its beat far ahead) keeps the window open until it goes.
    await database.db.query(
      `INSERT INTO cyclium_nodes (node_identity, mode, hostname, pid, version, started_at, last_seen_at)
       VALUES ('plain-x', 'full', 'elsewhere', 1, '0.0.0', now(), now() + interval '1 hour')`,
    );
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'race-a',
        workClaims: 'postgres',
        nodeBeatIntervalMs: 200,
        recovery: { onBoot: false },
        integrity: { keyId: 'k1', keys: { k1: 'cut-over-races-secret-0123456789abcdef' } },
      },
      providers: [RaceActor],
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  it('judges each row as the cut-over left it, not as it was read', async () => {
    const signer = app.get(RowSigner);
    const store = app.get(EpisodeStore);
    const signatures = app.get(EpisodeSignatures);
    const instances = app.get(WorkflowInstanceStore);
    const journal = app.get(EpisodeJournal);
    expect(signer.acceptsUnsigned).toBe(true);

    // Read while unsigned rows are accepted: a stale run to take over, a run of this node's to
    // resume (with a checkpoint), a workflow instance, and a resume's checkpoints whose reply is
    // held until after the cut-over.
    const stale = await unsigned('plain-x');
    const mine = await unsigned('race-a');
    const held = await unsigned('race-a');
    for (const id of [mine, held]) {
      await database.db.query(
        `INSERT INTO cyclium_episode_checkpoints (episode_id, checkpoint_no, phase, state)
         VALUES ($1, 1, 'first', '1')`,
        [id],
      );
      await database.db.query(
        `INSERT INTO cyclium_episode_steps (episode_id, step_no, kind, name) VALUES ($1, 1, 'step', 'first')`,
        [id],
      );
    }
    const [instance] = await rows<{ id: string }>(
      `INSERT INTO cyclium_workflow_instances (workflow_id, status, subject_value, version)
       VALUES ('race_wf', 'running', 's1', 1) RETURNING id`,
    );
    const candidate = await store.get(stale);
    const resumed = await store.get(mine);
    const read = await instances.get(instance?.id as string);
    // The resume's read of its checkpoints runs now; its reply reaches the journal only later.
    const sql = app.get(CycliumDataSource).sql;
    const query = sql.query.bind(sql) as (...args: unknown[]) => Promise<unknown>;
    let reply: () => void = () => undefined;
    const replied = new Promise<void>((resolve) => (reply = resolve));
    let readDone = false;
    jest.spyOn(sql, 'query').mockImplementation((async (...args: unknown[]) => {
      const result = await query(...args);
      const text = typeof args[0] === 'string' ? args[0] : '';
      if (!readDone && text.includes('FROM cyclium_episode_checkpoints WHERE episode_id')) {
        readDone = true;
        await replied;
      }
      return result;
    }) as typeof sql.query);
    const checkpoints = journal.checkpoints(held);
    await waitFor('the checkpoints read', () => readDone);

    // The node without the option goes: this node records the cut-over, signing what is in flight.
    await database.db.query(`DELETE FROM cyclium_nodes WHERE node_identity = 'plain-x'`);
    await waitFor('the cut-over', () => !signer.acceptsUnsigned, 10_000, 50);
    const [cutover] = await rows(`SELECT recorded_by FROM cyclium_integrity_cutovers`);
    expect(cutover).toEqual({ recorded_by: 'race-a' });
    reply();

    // A takeover judged on the unsigned read finds the row moved on: it writes nothing, and the
    // row keeps the signature the cut-over gave it.
    const taken = await app
      .get(CycliumDataSource)
      .transaction((client) => app.get(EpisodeRecoveryStore).take(client, candidate!, 'race-a'));
    expect(taken).toBeNull();
    const after = await store.get(stale);
    expect(after).toMatchObject({ attempts: 0, phase: null, ownerNode: 'plain-x' });
    expect(after?.signature).toEqual(expect.stringMatching(/^k1:/));
    expect(signatures.accepts(after!)).toBe(true);

    // The checkpoints read before the cut-over are read again, signed, and handed over.
    expect([...(await checkpoints).keys()]).toEqual([1]);

    // A workflow instance read unsigned is not failed as tampered: it moved on.
    expect(instances.verify(read!)).toBe(false);
    expect(await instances.failTampered(read!, 'tampered: stale read')).toBe(false);
    const instanceNow = await instances.get(instance?.id as string);
    expect(instanceNow?.status).toBe('running');
    expect(instances.verify(instanceNow!)).toBe(true);

    // A run handed the unsigned row after the cut-over runs it: the row verifies as it is now.
    const grant = await app.get(WorkClaims).acquire(`episode:${mine}`);
    const expectation = app.get(ActorRegistry).expectation('race', 'two');
    await app.get(EpisodeRunner).run(resumed!, expectation, grant, { resumed: true });
    const [ended] = await rows(`SELECT status, error_class FROM cyclium_episodes WHERE id = $1`, [
      mine,
    ]);
    expect(ended).toEqual({ status: 'done', error_class: null });
    expect(ran).toEqual([`${mine}:second`]);
  }, 60_000);
});
