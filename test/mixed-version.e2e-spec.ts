/**
 * Releases that can roll: a node of the previous release runs beside a node of this tree on one
 * database migrated by this tree's migrations, while episodes, bus events and recoveries flow, and
 * nothing is lost or doubled. Every schema or row-protocol change must keep this green (see
 * CHANGELOG.md, "Rolling releases"); when a release is cut, PREVIOUS_RELEASE moves to it.
 *
 * The old node is the previous release's library (test/support/previous-release.ts builds it from
 * git once per commit) under this tree's test/fixtures/mixed-node.ts; the new node is the same
 * fixture on this tree's build. Each process hosts one node per env: `mv-claims` with work claims
 * on PostgreSQL, `mv-plain` with claims off (the default); bus 'postgres' in both.
 *
 * Two waves. In each, every node triggers `restart` and `fail` episodes by hand and publishes
 * events of both kinds, which the cluster places on either node. Wave one runs on old-1 and new;
 * old-1 is killed (-9) mid-episode and new must recover its episodes by their policy. Then old-2
 * boots, wave two runs on new and old-2, new is killed mid-episode and old-2 recovers them.
 *
 * At the end: every trigger and every event started exactly one episode; `restart` episodes end
 * `done` with each step journaled once, `fail` episodes end `done`, or `failed / orphaned` when a
 * kill caught them; each recovery was made by the surviving node of the other version; no step
 * ran again after its checkpoint (its side effect, written just before the checkpoint, never
 * appears after it), and only a step a kill interrupted may have run twice; each `done` episode
 * has one output, delivered, never twice on the same attempt; and every episode has exactly its one
 * terminal lifecycle event, whichever version ended it (the old nodes read every type).
 *
 * Skipped, with a notice, in a clone without the previous release's commit (a shallow clone).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import { useDatabase } from './support/database.js';
import {
  MIXED_NODE,
  publishOn,
  startMixedProcess,
  triggerOn,
  type MixedNode,
  type MixedProcess,
} from './support/mixed-node.js';
import {
  PREVIOUS_RELEASE,
  previousRelease,
  previousReleaseCommit,
  type PreviousRelease,
} from './support/previous-release.js';
import { waitFor } from './support/wait-for.js';

const commit = previousReleaseCommit();
if (!commit) {
  console.warn(
    `NOTICE: test/mixed-version.e2e-spec.ts is SKIPPED: commit ${PREVIOUS_RELEASE.commit} (${PREVIOUS_RELEASE.tag}, the previous release) ` +
      `is not in this clone's history (a shallow clone?); fetch it (git fetch --unshallow) to run the mixed-version test`,
  );
}

const TIMINGS = { stepMs: 800, staleAfterMs: 3_000, leaseSeconds: 2, beatMs: 500 };
const ENVS = [
  { env: 'mv-claims', claims: 'postgres' },
  { env: 'mv-plain', claims: 'off' },
] as const;
/** Per node, env and wave: triggers by hand and events published, of each expectation. */
const PER_NODE = { manual: { restart: 2, fail: 1 }, event: { restart: 3, fail: 1 } } as const;
const NEW_LIBRARY = fileURLToPath(new URL('../libs/cyclium/dist/index.js', import.meta.url));

type Expectation = 'restart' | 'fail';
interface Sent {
  key: string;
  env: string;
  expectation: Expectation;
  via: 'manual' | 'event';
  /** The process that took the trigger or published the event. */
  through: string;
  /** The episode id a manual trigger answered. */
  episodeId?: string;
}

interface Kill {
  victim: string;
  survivor: string;
}

const nodesOf = (name: string): MixedNode[] =>
  ENVS.map(({ env, claims }) => ({ env, claims, nodeId: `${name}-${claims}` }));
const identity = (name: string, env: string) =>
  `${name}-${ENVS.find((e) => e.env === env)?.claims}`;

(commit ? describe : describe.skip)(
  `a node of the previous release (${PREVIOUS_RELEASE.tag}) beside a node of this tree`,
  () => {
    const database = useDatabase();
    const processes: MixedProcess[] = [];
    let release: PreviousRelease;

    beforeAll(async () => {
      // The first run in a clone builds the old library (a few seconds); later runs reuse it.
      release = previousRelease(commit as string);
      await database.db.query(
        `CREATE TABLE mixed_effects (episode_id uuid NOT NULL, step text NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      );
      await database.db.query(
        `CREATE TABLE mixed_starts (episode_id uuid NOT NULL, node text NOT NULL, resumed boolean NOT NULL)`,
      );
      await database.db.query(
        `CREATE TABLE mixed_deliveries (key text NOT NULL, attempt int NOT NULL, node text NOT NULL)`,
      );
    }, 120_000);

    afterAll(async () => {
      await Promise.all(processes.map((p) => p.stop('SIGKILL')));
    });

    const start = async (version: 'old' | 'new', name: string) => {
      const started = await startMixedProcess(
        version === 'old' ? release.main : MIXED_NODE,
        database.url,
        nodesOf(name),
        TIMINGS,
      );
      processes.push(started);
      return started;
    };

    const sent: Sent[] = [];
    /** One wave: every process in `through`, in every env, triggers and publishes PER_NODE of each expectation. */
    const wave = async (label: string, through: Record<string, MixedProcess>) => {
      const jobs: Array<Promise<void>> = [];
      for (const [name, node] of Object.entries(through)) {
        for (const { env } of ENVS) {
          for (const via of ['manual', 'event'] as const) {
            for (const expectation of ['restart', 'fail'] as const) {
              for (let i = 0; i < PER_NODE[via][expectation]; i++) {
                const item: Sent = {
                  key: `${label}-${env}-${name}-${via}-${expectation}-${i}`,
                  env,
                  expectation,
                  via,
                  through: name,
                };
                sent.push(item);
                jobs.push(
                  via === 'manual'
                    ? triggerOn(node, env, expectation, item.key).then(
                        (id) => void (item.episodeId = id),
                      )
                    : publishOn(node, env, expectation, item.key),
                );
              }
            }
          }
        }
      }
      await Promise.all(jobs);
    };

    const stepsOf = async (ids: string[]) =>
      (
        await database.db.query<{ id: string; n: number }>(
          `SELECT e.id, count(s.*)::int AS n FROM unnest($1::uuid[]) e(id) LEFT JOIN cyclium_episode_steps s ON s.episode_id = e.id AND s.kind = 'step' GROUP BY e.id`,
          [ids],
        )
      ).rows;

    /** Kills `victim` (-9) once each episode triggered by hand on it in this wave has a step journaled (the rest still to run). */
    const killMidEpisode = async (
      label: string,
      victim: string,
      node: MixedProcess,
      kills: Kill[],
      survivor: string,
    ) => {
      const ids = sent
        .filter((s) => s.key.startsWith(`${label}-`) && s.through === victim && s.via === 'manual')
        .map((s) => s.episodeId as string);
      await waitFor(
        `${victim}'s episodes of ${label} mid-run`,
        async () => (await stepsOf(ids)).every((r) => r.n >= 1),
        20_000,
        50,
      );
      await node.stop('SIGKILL');
      kills.push({ victim, survivor });
    };

    /** Waits until no episode is left running or queued on `victim`'s nodes: the survivor took each by its policy. */
    const recovered = (victim: string) =>
      waitFor(
        `${victim}'s episodes to be recovered`,
        async () =>
          (
            await database.db.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM cyclium_episodes WHERE status IN ('running', 'queued') AND owner_node = ANY($1)`,
              [ENVS.map((e) => identity(victim, e.env))],
            )
          ).rows[0]?.n === 0,
        20_000,
        100,
      );

    it('runs episodes, events and recoveries across the two versions with nothing lost or doubled', async () => {
      const began = performance.now();
      const kills: Kill[] = [];
      const [old1, fresh] = await Promise.all([start('old', 'old-1'), start('new', 'new')]);
      // The old node really runs the previous release's build, the new one this tree's.
      expect(old1.library).toBe(release.entry);
      expect(fresh.library).toBe(NEW_LIBRARY);

      await wave('w1', { 'old-1': old1, new: fresh });
      await killMidEpisode('w1', 'old-1', old1, kills, 'new');
      await recovered('old-1');

      const old2 = await start('old', 'old-2');
      expect(old2.library).toBe(release.entry);
      await wave('w2', { new: fresh, 'old-2': old2 });
      await killMidEpisode('w2', 'new', fresh, kills, 'old-2');
      await recovered('new');

      await waitFor(
        'every episode to end and its output to be delivered',
        async () => {
          const { rows } = await database.db.query<{
            live: number;
            episodes: number;
            pending: number;
          }>(
            `SELECT (SELECT count(*)::int FROM cyclium_episodes WHERE status NOT IN ('done', 'failed')) AS live,
                  (SELECT count(*)::int FROM cyclium_episodes) AS episodes,
                  (SELECT count(*)::int FROM cyclium_outputs WHERE status <> 'delivered') AS pending`,
          );
          const row = rows[0];
          return (
            row !== undefined && row.live === 0 && row.pending === 0 && row.episodes >= sent.length
          );
        },
        30_000,
        200,
      ).catch(() => undefined); // the assertions below say what is missing

      const { rows: episodes } = await database.db.query<{
        id: string;
        key: string;
        trigger_type: string;
        event_id: string | null;
        expectation_id: string;
        status: string;
        error_class: string | null;
        attempts: number;
        max_attempts: number;
        source_env: string;
      }>(
        `SELECT id, trigger_ref->'payload'->>'key' AS key, trigger_type, trigger_ref->>'eventId' AS event_id, expectation_id,
              status, error_class, attempts, max_attempts, source_env
         FROM cyclium_episodes WHERE actor_id = 'mixed_work'`,
      );
      const { rows: journal } = await database.db.query<{
        episode_id: string;
        kind: string;
        name: string;
        node: string | null;
        last_owner: string | null;
      }>(
        `SELECT episode_id, kind, name, result_ref->>'node' AS node, result_ref->>'lastOwner' AS last_owner FROM cyclium_episode_steps ORDER BY episode_id, step_no`,
      );
      const { rows: effects } = await database.db.query<{
        episode_id: string;
        step: string;
        node: string;
        after_checkpoint: boolean;
      }>(
        `SELECT f.episode_id, f.step, f.node, coalesce(f.at > s.created_at, false) AS after_checkpoint
         FROM mixed_effects f LEFT JOIN cyclium_episode_steps s ON s.episode_id = f.episode_id AND s.kind = 'step' AND s.name = f.step`,
      );
      const { rows: outputs } = await database.db.query<{
        episode_id: string;
        key: string;
        status: string;
        attempts: number;
      }>(`SELECT episode_id, payload->>'key' AS key, status, attempts FROM cyclium_outputs`);
      const { rows: deliveries } = await database.db.query<{
        key: string;
        attempt: number;
        node: string;
      }>(`SELECT key, attempt, node FROM mixed_deliveries`);

      const { rows: terminal } = await database.db.query<{ episode_id: string; type: string }>(
        `SELECT payload->>'episodeId' AS episode_id, type FROM cyclium_events
          WHERE type IN ('episode.completed', 'episode.failed', 'episode.canceled')`,
      );

      // A new episode this tree began holds its claim in its row alone until someone takes it over;
      // a takeover (by either version) goes through cyclium_work_claims, and whichever version then
      // renewed, stole or finished it, the episode row holds it as the claim table does: the
      // database mirrors the previous release's claim writes too. A claim still in the row alone
      // ended with its episode, in the row.
      const { rows: claimCopies } = await database.db.query<{
        id: string;
        copied: boolean;
        in_table: boolean;
      }>(
        `SELECT e.id, c.dedupe_key IS NOT NULL AS in_table,
                CASE WHEN c.dedupe_key IS NULL
                     THEN e.claim_state = CASE e.status WHEN 'done' THEN 'done' ELSE 'failed' END
                     ELSE (c.owner_node, c.fence, c.state, c.lease_until, c.attempt)
                          IS NOT DISTINCT FROM (e.claim_owner, e.claim_fence, e.claim_state,
                                                e.claim_lease_until, e.claim_attempt) END AS copied
           FROM cyclium_episodes e
           LEFT JOIN cyclium_work_claims c ON c.dedupe_key = coalesce(e.dedupe_key, 'episode:' || e.id)
          WHERE e.actor_id = 'mixed_work' AND e.source_env = 'mv-claims'`,
      );
      // Both shapes met: some claims stayed in their rows, some were taken over through the table.
      expect(new Set(claimCopies.map((c) => c.in_table))).toEqual(new Set([true, false]));
      const copied = new Map(claimCopies.map((c) => [c.id, c.copied]));

      const byKey = new Map<string, typeof episodes>();
      for (const episode of episodes)
        byKey.set(episode.key, [...(byKey.get(episode.key) ?? []), episode]);
      const journalOf = (id: string) => journal.filter((j) => j.episode_id === id);
      const markers = journal.filter((j) => j.name === 'resumed' || j.name === 'orphaned');
      const victims = new Set(kills.flatMap((k) => ENVS.map((e) => identity(k.victim, e.env))));

      // Nothing lost, nothing doubled: one episode per trigger and per event, and none that nobody sent.
      expect(episodes.map((e) => e.key).sort()).toEqual(sent.map((s) => s.key).sort());
      const problems: string[] = [];
      for (const item of sent) {
        const [episode] = byKey.get(item.key) ?? [];
        if (!episode) continue;
        const steps = journalOf(episode.id).filter((j) => j.kind === 'step');
        const interruptions = journalOf(episode.id).filter(
          (j) => j.name === 'resumed' || j.name === 'orphaned',
        ).length;
        const mine = effects.filter((f) => f.episode_id === episode.id);
        const say = (what: string) => problems.push(`${item.key} (${episode.id}): ${what}`);
        if (episode.source_env !== item.env || episode.expectation_id !== item.expectation)
          say(`ran as ${episode.source_env}/${episode.expectation_id}`);
        if (
          item.via === 'manual' &&
          (episode.trigger_type !== 'manual' || episode.id !== item.episodeId)
        )
          say(`not the manual trigger's episode`);
        if (
          item.via === 'event' &&
          (episode.trigger_type !== 'event' || episode.event_id !== item.key)
        )
          say(`not the event's episode`);
        const orphaned =
          episode.status === 'failed' &&
          episode.error_class === 'orphaned' &&
          item.expectation === 'fail';
        if (episode.status !== 'done' && !orphaned)
          say(`ended ${episode.status} / ${episode.error_class}`);
        const killedOn = journalOf(episode.id).some(
          (j) => j.name === 'orphaned' && victims.has(j.last_owner ?? ''),
        );
        if (orphaned && !killedOn) say('orphaned, but not taken from a node that was killed');
        if (episode.attempts > episode.max_attempts)
          say(`attempts ${episode.attempts} > ${episode.max_attempts}`);
        const names = steps.map((s) => s.name);
        const expected =
          episode.status === 'done'
            ? ['s1', 's2', 's3']
            : ['s1', 's2', 's3'].slice(0, names.length);
        if (names.join() !== expected.join()) say(`steps journaled ${names.join()}`);
        // A step runs again only when a kill interrupted it before its checkpoint: once per interruption.
        if (mine.some((f) => f.after_checkpoint)) say(`a step ran again after its checkpoint`);
        if (names.some((name) => !mine.some((f) => f.step === name)))
          say(`a journaled step left no side effect`);
        if (mine.length > names.length + interruptions)
          say(
            `${mine.length} side effects for ${names.length} steps and ${interruptions} interruptions`,
          );
        const output = outputs.filter((o) => o.episode_id === episode.id);
        const delivered = deliveries.filter((d) => d.key === item.key);
        if (episode.status === 'done') {
          if (
            output.length !== 1 ||
            output[0]?.status !== 'delivered' ||
            output[0]?.key !== item.key
          )
            say(`outputs ${JSON.stringify(output)}`);
          if (
            delivered.length < 1 ||
            new Set(delivered.map((d) => d.attempt)).size !== delivered.length
          )
            say(`deliveries ${JSON.stringify(delivered)}`);
        } else if (output.length > 0) say(`a failed episode has outputs`);
        // A node of the previous release declares no lifecycle reads, so while one is live (or
        // killed within the readers' five minutes) every end, of either version, writes its event.
        const announced = terminal.filter((t) => t.episode_id === episode.id).map((t) => t.type);
        const announcing = episode.status === 'done' ? 'episode.completed' : 'episode.failed';
        if (announced.join() !== announcing) say(`terminal events [${announced.join()}]`);
        if (episode.source_env === 'mv-claims' && copied.get(episode.id) !== true)
          say(`its row does not hold its claim as cyclium_work_claims does, or did not end it`);
      }
      expect(problems).toEqual([]);
      expect(outputs).toHaveLength(episodes.filter((e) => e.status === 'done').length);

      // Each kill was recovered by the survivor, of the other version, in each env: a restart resumed and a fail orphaned at least.
      const figures: string[] = [];
      for (const kill of kills) {
        for (const { env } of ENVS) {
          const taken = markers.filter((m) => m.last_owner === identity(kill.victim, env));
          const by = new Set(taken.map((m) => m.node));
          const resumed = taken.filter((m) => m.name === 'resumed').length;
          const orphaned = taken.filter((m) => m.name === 'orphaned').length;
          figures.push(
            `  ${kill.victim} killed in ${env}: ${resumed} resumed, ${orphaned} orphaned by ${[...by].join(', ')}`,
          );
          expect({ kill: kill.victim, env, by: [...by] }).toEqual({
            kill: kill.victim,
            env,
            by: [identity(kill.survivor, env)],
          });
          expect({ kill: kill.victim, env, resumed: resumed > 0, orphaned: orphaned > 0 }).toEqual({
            kill: kill.victim,
            env,
            resumed: true,
            orphaned: true,
          });
        }
      }
      // Events cross versions both ways: some published by an old node started (not resumed) on the
      // new one, and some published by the new node on an old one. (Which node starts an event is the
      // placement's choice; with 16 events from each side, never all on one version by chance.)
      const { rows: starts } = await database.db.query<{ episode_id: string; node: string }>(
        `SELECT episode_id, node FROM mixed_starts WHERE NOT resumed`,
      );
      const versionOf = (node: string) => (node.startsWith('new-') ? 'new' : 'old');
      const crossed = new Map<string, number>();
      for (const start of starts) {
        const episode = episodes.find((e) => e.id === start.episode_id);
        const item = sent.find((s) => s.key === episode?.key);
        if (item?.via !== 'event') continue;
        const way = `published on ${versionOf(`${item.through}-`)}, started on ${versionOf(start.node)}`;
        crossed.set(way, (crossed.get(way) ?? 0) + 1);
      }
      expect([...crossed.keys()]).toEqual(
        expect.arrayContaining([
          'published on new, started on old',
          'published on old, started on new',
        ]),
      );
      const count = (status: string) => episodes.filter((e) => e.status === status).length;
      console.log(
        `mixed versions (${PREVIOUS_RELEASE.tag} ${release.commit.slice(0, 7)} beside this tree), ${((performance.now() - began) / 1000).toFixed(1)} s: ` +
          `${episodes.length} episodes (${sent.filter((s) => s.via === 'event').length} from events), ${count('done')} done, ${count('failed')} failed / orphaned, ` +
          `${markers.length} recoveries, ${deliveries.length} deliveries of ${outputs.length} outputs\n${figures.join('\n')}\n` +
          [...crossed].map(([way, n]) => `  events ${way}: ${n}`).join('\n'),
      );
    }, 180_000);
  },
);
