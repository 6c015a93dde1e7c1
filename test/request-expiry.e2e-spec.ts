import { afterAll, describe, expect, it } from '@jest/globals';
import { NodeIdentity } from '@cyclium/nestjs';
import { Peers } from '../libs/cyclium/src/cluster/peers.service.js';
import { resolveCycliumOptions } from '../libs/cyclium/src/options/resolve-options.js';
import { eventKey } from '../libs/cyclium/src/triggers/dedupe-keys.js';
import { useDatabase } from './support/database.js';
import type { DemoNode } from './support/demo-node.js';
import {
  FAST_RECOVERY,
  post,
  rebalanceOn,
  startNode,
  waitForStatus,
} from './support/demo-cluster.js';
import { waitFor } from './support/wait-for.js';

/** Short, so a whole-cluster stop outlasts it. */
const TTL_MS = 2_000;
const ACTOR = 'resource_rebalancer';
const REQUESTS_OF = `SELECT status, inserted_at FROM cyclium_trigger_requests WHERE episode_id = $1`;
const EPISODE_OF_EVENT = `SELECT id, status FROM cyclium_episodes WHERE trigger_ref->>'eventId' = $1`;
const PAST = `SELECT now() > $1::timestamptz + make_interval(secs => $2) AS past`;
const ENDED = `SELECT id, status, error_class FROM cyclium_episodes WHERE id = ANY($1::uuid[])`;
const BEATEN = `SELECT count(*)::int AS n FROM cyclium_nodes
                 WHERE last_seen_at > (SELECT max(started_at) + interval '1 second' FROM cyclium_nodes)`;

/** The node of `identities` (all hosting the rebalancer) that ranks first for `eventId`'s trigger of `rebalance`. */
function firstFor(identities: string[], eventId: string, payload: unknown): string {
  const key = eventKey(ACTOR, 'rebalance', 'resource.rebalance', eventId, payload);
  for (const name of identities) {
    const peers = new Peers(new NodeIdentity(resolveCycliumOptions({ nodeIdentity: name })));
    peers.update(identities.map((identity) => ({ identity, actors: [ACTOR] })));
    if (peers.rankOf(key, ACTOR) === 0) return name;
  }
  throw new Error(`no node ranks first for ${eventId}`);
}

/**
 * Trigger requests and whole-cluster stops, with real node processes. Accepted work (a trigger a
 * draining node handed over, an operator's retry, a zero-backoff retry, a restart recovery
 * deferred) never expires: written, the whole cluster stopped past the TTL, it runs to `done` on the
 * next node up. A trigger-only node's request to run now expires only once the TTL has run with a
 * full node of its env up: never while there is none, however long.
 */
describe('trigger requests across whole-cluster stops', () => {
  const database = useDatabase(4);
  const env = {
    ...FAST_RECOVERY,
    DEMO_TRIGGER_POLL_MS: '500',
    DEMO_TRIGGER_TTL_MS: String(TTL_MS),
    DEMO_RETRY_INITIAL_MS: '0',
  };
  const rows = async (sql: string, params: unknown[]) =>
    (await database.db.query(sql, params)).rows;
  const nodes: DemoNode[] = [];
  const boot = async (id: string, extra: Record<string, string> = {}) => {
    const node = await startNode(database.url, id, { ...env, ...extra });
    nodes.push(node);
    return node;
  };
  const mode = (node: DemoNode, overrides: Record<string, string>) =>
    fetch(`http://127.0.0.1:${node.port}/mode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ overrides }),
    }).then((response) => expect(response.status).toBe(200));
  const requestsOf = (id: string) => rows(REQUESTS_OF, [id]);
  const episodeOfEvent = async (eventId: string) => (await rows(EPISODE_OF_EVENT, [eventId]))[0];
  /** Waits until the database clock is `ms` past `at`. */
  const pastBy = (what: string, at: Date, ms: number) => {
    const past = async () => (await rows(PAST, [at, ms / 1000]))[0].past;
    return waitFor(what, past, ms + 10_000, 100);
  };

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop('SIGKILL')));
  });

  it('runs a handover, an operator retry, a zero-backoff retry and a deferred restart after a long stop', async () => {
    const [f, b] = await Promise.all([boot('keep-f'), boot('keep-b')]);
    await waitFor(
      'both nodes to have beaten after the later one',
      async () => (await rows(BEATEN, []))[0].n === 2,
    );
    // An episode that failed, for the operator to retry later.
    const failOnce = { stepMs: 20, failAtStep: 1, failTimes: 1 };
    const retried = await rebalanceOn(f, { resource: 'operator', ...failOnce }, 'rebalance_once');
    await waitForStatus(database.db, retried, 'failed');
    // A run recovery will restart, and one whose first step fails once with no backoff: both outlast the setup below.
    const restarted = await rebalanceOn(b, { resource: 'restart', stepMs: 2_000 });
    const zeroBackoff = await rebalanceOn(
      f,
      { resource: 'zero', ...failOnce, stepMs: 2_500 },
      'rebalance_retried',
    );
    // From now on no node runs the rebalancer: every request of it waits.
    await Promise.all([mode(f, { [ACTOR]: 'disabled' }), mode(b, { [ACTOR]: 'trigger_only' })]);
    await waitForStatus(database.db, zeroBackoff, 'waiting', 15_000);

    // An event keep-f ranks first for (and drops, disabled), so keep-b stands by for it (2 s); then
    // one keep-b ranks first for: once that one has its episode, keep-b has read (and stands by for) the first.
    const payload = { resource: 'handed', stepMs: 20 };
    const pick = (first: string) => {
      for (let i = 0; ; i++) {
        const eventId = `hand-${first}-${i}`;
        if (firstFor(['keep-f', 'keep-b'], eventId, payload) === first) return eventId;
      }
    };
    const [handed, marker] = [pick('keep-f'), pick('keep-b')];
    for (const eventId of [handed, marker])
      await post(b, '/events', { type: 'resource.rebalance', eventId, payload });
    await waitFor(
      'keep-b to take the event it ranks first for',
      () => episodeOfEvent(marker),
      10_000,
    );
    // keep-f defers the restart of what keep-b's drain interrupts.
    await mode(f, { [ACTOR]: 'trigger_only' });

    await b.stop('SIGTERM');
    const handedOver = (await waitFor('the handed-over event to wait as deferred', async () => {
      const row = await episodeOfEvent(handed);
      return row?.status === 'deferred' ? (row.id as string) : undefined;
    })) as string;
    await waitForStatus(database.db, restarted, 'deferred', 15_000);
    const ops = { method: 'POST', headers: { 'x-cyclium-ops': '1' } };
    expect(
      (await fetch(`http://127.0.0.1:${f.port}/ops/api/episodes/${retried}/retry`, ops)).status,
    ).toBe(202);

    const accepted = { handedOver, retried, zeroBackoff, restarted };
    let newest = new Date(0);
    for (const [what, id] of Object.entries(accepted)) {
      const requests = await requestsOf(id);
      const waiting = requests.filter(
        (r) => r.status === 'pending' || r.status === 'scheduled',
      ).length;
      expect({ what, waiting }).toEqual({ what, waiting: 1 });
      for (const r of requests) if (r.inserted_at > newest) newest = r.inserted_at as Date;
    }
    // The whole cluster stops, and stays down past the TTL of every request.
    await f.stop('SIGKILL');
    await pastBy('every request to be older than the TTL with no node up', newest, TTL_MS + 500);

    const n = await boot('keep-n');
    const ended = () => rows(ENDED, [Object.values(accepted)]);
    const allEnded = async () =>
      (await ended()).every((r) => r.status === 'done' || r.status === 'failed');
    await waitFor('every accepted episode to end', allEnded, 30_000, 200);
    const by = new Map(
      (await ended()).map((r) => [r.id, `${r.status}${r.error_class ? `/${r.error_class}` : ''}`]),
    );
    const outcomes = Object.fromEntries(
      Object.entries(accepted).map(([what, id]) => [what, by.get(id)]),
    );
    expect(outcomes).toEqual({
      handedOver: 'done',
      retried: 'done',
      zeroBackoff: 'done',
      restarted: 'done',
    });
    await n.stop('SIGKILL');
  }, 180_000);

  it('expires a trigger-only request only once a full node of its env has been up for the TTL', async () => {
    const lonely = { CYCLIUM_ENV: 'lonely' };
    const trigger = await boot('lonely-t', { ...lonely, CYCLIUM_MODE: 'trigger_only' });
    const body = { payload: { resource: 'lonely', stepMs: 20 } };
    const answer = await post<{ status: string; episodeId: string }>(
      trigger,
      `/actors/${ACTOR}/rebalance`,
      body,
    );
    const { status, episodeId } = answer;
    expect(status).toBe('deferred');
    const [request] = await requestsOf(episodeId);
    // No full node in its env: however long it waits, it stays.
    await pastBy(
      'twice the TTL with no full node in the env',
      request.inserted_at as Date,
      2 * TTL_MS,
    );
    expect((await requestsOf(episodeId)).map((r) => r.status)).toEqual(['pending']);

    // A full node of the env that does not host the rebalancer: once it has been up for the TTL, the
    // request expires.
    await boot('lonely-full', { ...lonely, DEMO_DROP_ACTORS: ACTOR });
    const row = await waitForStatus(database.db, episodeId, 'failed', 15_000);
    expect(row.error_class).toBe('trigger_request_expired');
    const [expiry] = await rows(
      `SELECT (extract(epoch FROM r.completed_at - n.started_at) * 1000)::float8 AS after_up
         FROM cyclium_trigger_requests r, cyclium_nodes n
        WHERE r.episode_id = $1 AND n.node_identity = 'lonely-full'`,
      [episodeId],
    );
    expect(expiry.after_up).toBeGreaterThanOrEqual(TTL_MS);
  });
});
