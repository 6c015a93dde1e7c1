import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import type { Page } from 'playwright-core';
import { useDatabase } from './support/database.js';
import { startDemoNode, type DemoNode } from './support/demo-node.js';
import { holdRequests, OpsBrowserRig } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

// The advisor's schedule would add an episode a minute: the tables hold only what the tests cause.
const NODE_ENV = { CYCLIUM_NODE_ID: 'wf-ops-1', DEMO_JITTER_MS: '0', DEMO_ADVISOR_EVERY: '1h' };
/** The header the page sends with every state-changing request. */
const CSRF = { 'x-cyclium-ops': '1' };

interface StepState {
  status: string;
  episodeId: string | null;
}

interface Instance {
  id: string;
  status: string;
  subjectValue: string | null;
  error: string | null;
  stepStates: Record<string, StepState>;
  definition: {
    id: string;
    steps: Array<{ id: string; actorId: string; expectationId: string; after: string[] }>;
  } | null;
}

/**
 * A workflow instance on the operations page of a real demo node: its detail opened by a link
 * (`?workflow=`) or a row, its step graph (one box per step of the definition, one arrow per
 * dependency, each box its step's status, a box opening its step's episode), and its cancel
 * behind the page's confirmation.
 */
describe('the operations page: a workflow instance, its step graph and its cancel', () => {
  const database = useDatabase();
  let node: DemoNode;
  let page: Page;
  const rig = new OpsBrowserRig<DemoNode>();
  let finishedId: string;

  const base = () => `http://127.0.0.1:${node.port}`;
  const instance = (id: string) => node.get<Instance>(`/ops/api/workflows/${id}`);
  const startReview = async (input: object): Promise<string> => {
    const response = await fetch(`${base()}/workflows/resource_review`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input }),
    });
    expect(response.status).toBe(202);
    return ((await response.json()) as { instanceId: string }).instanceId;
  };
  const cancelCall = (id: string, body: unknown, headers: Record<string, string> = CSRF) =>
    fetch(`${base()}/ops/api/workflows/${id}/cancel`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
  const text = async (testid: string) =>
    ((await page.getByTestId(testid).textContent()) ?? '').trim();
  const pageShows = (what: string, probe: () => Promise<boolean>) =>
    waitFor(what, probe, 15_000, 100);
  /** The graph on the page: each box's step, status and episode, and each arrow. */
  const graph = async () => ({
    steps: await page
      .locator('[data-testid="workflow-step"]')
      .evaluateAll((boxes) =>
        boxes.map((b) => [
          b.getAttribute('data-step'),
          b.getAttribute('data-status'),
          b.getAttribute('data-episode-id'),
        ]),
      ),
    edges: await page
      .locator('[data-testid="workflow-edge"]')
      .evaluateAll((edges) =>
        edges.map((e) => [e.getAttribute('data-from'), e.getAttribute('data-to')]),
      ),
  });
  /** What the graph should hold for `detail`, as the API answers it. */
  const expectedGraph = (detail: Instance) => ({
    steps: detail.definition!.steps.map((s) => [
      s.id,
      detail.stepStates[s.id]?.status ?? null,
      detail.stepStates[s.id]?.episodeId ?? null,
    ]),
    edges: detail.definition!.steps.flatMap((s) => s.after.map((a) => [a, s.id])),
  });

  beforeAll(async () => {
    ({ node, page } = await rig.start(startDemoNode(database.url, NODE_ENV)));
  });

  afterAll(() => rig.close({ screenshot: 'ops-page-workflows.png' }));

  it('opens an instance from its link: a box per step, an arrow per dependency, the statuses of the API, and a step opens its episode', async () => {
    finishedId = await startReview({ resource: 'db-graph', usage: 97, limit: 90 });
    const detail = (await waitFor('the review to finish', async () => {
      const read = await instance(finishedId);
      return read.status === 'done' ? read : undefined;
    })) as Instance;
    // The definition as this node declares it, in declaration order.
    expect(detail.definition).toEqual({
      id: 'resource_review',
      steps: [
        {
          id: 'check',
          actorId: 'resource_monitor',
          expectationId: 'check_resource_limits',
          after: [],
        },
        { id: 'advise', actorId: 'resource_advisor', expectationId: 'advise', after: ['check'] },
      ],
    });

    await page.goto(`${base()}/ops?workflow=${finishedId}`);
    await page.getByTestId('workflow-detail').waitFor({ state: 'visible' });
    expect(await text('workflow-detail-id')).toBe(finishedId);
    expect(await text('workflow-detail-status')).toBe('done');
    expect(await page.getByTestId('workflow-fields').textContent()).toContain('db-graph');
    await page.getByTestId('workflow-graph').waitFor();
    expect(await graph()).toEqual(expectedGraph(detail));
    expect(await graph()).toMatchObject({ steps: { length: 2 }, edges: [['check', 'advise']] });
    // A finished instance offers no cancel.
    expect(await page.getByTestId('workflow-cancel-button').isVisible()).toBe(false);

    // A step's box opens its episode's detail, and both stay in the address.
    const advise = detail.stepStates.advise!.episodeId!;
    await page.locator('[data-testid="workflow-step"][data-step="advise"]').click();
    await pageShows(
      "the advise step's episode to open",
      async () =>
        (await page.getByTestId('episode-detail').isVisible()) &&
        (await text('detail-id')) === advise,
    );
    expect(await text('detail-status')).toBe('done');
    const address = new URL(page.url()).searchParams;
    expect([address.get('workflow'), address.get('episode')]).toEqual([finishedId, advise]);

    // Closed, then opened again from its row in the list.
    await page.getByTestId('workflow-detail-close').click();
    expect(await page.getByTestId('workflow-detail').isVisible()).toBe(false);
    expect(new URL(page.url()).searchParams.get('workflow')).toBeNull();
    await page.locator(`[data-testid="workflow-row"][data-workflow-id="${finishedId}"]`).click();
    await pageShows(
      'the row to open the instance',
      async () =>
        (await page.getByTestId('workflow-detail').isVisible()) &&
        (await text('workflow-detail-id')) === finishedId,
    );
    expect(new URL(page.url()).searchParams.get('workflow')).toBe(finishedId);
  });

  it('cancels a live instance through the confirmation, with a reason, and shows it canceled; Cancel waits for its detail', async () => {
    // The advice takes a minute to draft: the instance stays live with its second step running.
    const id = await startReview({ resource: 'db-live', usage: 10, draftMs: 60_000 });
    await waitFor(
      'the advise step to run',
      async () => (await instance(id)).stepStates.advise?.status === 'running',
    );
    // While its detail loads, the instance on screen is another's (or none): Cancel waits for it.
    const release = await holdRequests(page, `**/ops/api/workflows/${id}`);
    try {
      await page.locator(`[data-testid="workflow-row"][data-workflow-id="${id}"]`).click();
      expect(await text('workflow-detail-id')).not.toBe(id);
      expect(await page.getByTestId('workflow-cancel-button').isDisabled()).toBe(true);
    } finally {
      await release();
    }
    await pageShows(
      'the graph to show the advise step running',
      async () =>
        (await text('workflow-detail-id')) === id &&
        (await page
          .locator('[data-testid="workflow-step"][data-step="advise"]')
          .getAttribute('data-status')) === 'running',
    );
    expect(await graph()).toEqual(expectedGraph(await instance(id)));
    expect(await text('workflow-detail-status')).toBe('running');

    await page.getByTestId('workflow-cancel-button').click();
    await page.getByTestId('confirm-dialog').waitFor({ state: 'visible' });
    expect(await text('confirm-question')).toContain(`Cancel workflow instance ${id}?`);
    await page.getByTestId('confirm-reason').fill('stuck drafting');
    await page.getByTestId('confirm-ok').click();
    await pageShows(
      'the detail to show it canceled',
      async () =>
        (await text('workflow-detail-status')) === 'canceled' &&
        (await page
          .locator('[data-testid="workflow-step"][data-step="advise"]')
          .getAttribute('data-status')) === 'canceled',
    );
    expect(await text('workflow-action-result')).toBe('canceled');
    expect(await page.getByTestId('workflow-cancel-button').isVisible()).toBe(false);
    await pageShows(
      'its row to show canceled',
      async () =>
        (await page
          .locator(`[data-testid="workflow-row"][data-workflow-id="${id}"]`)
          .getAttribute('data-status')) === 'canceled',
    );
    const canceled = await instance(id);
    expect(canceled).toMatchObject({
      status: 'canceled',
      error: 'canceled from the operations page: stuck drafting',
    });
    expect(await graph()).toEqual(expectedGraph(canceled));
    // The running step's episode was told to stop: it ends canceled at its next check.
    const advise = canceled.stepStates.advise!.episodeId!;
    await waitFor(
      "the advise step's episode to end canceled",
      async () =>
        (await node.get<{ episode: { status: string } }>(`/ops/api/episodes/${advise}`)).episode
          .status === 'canceled',
    );
    await waitFor('the log line naming the instance and the reason', () =>
      node
        .output()
        .includes(
          `workflow instance ${id} canceled from the operations page (reason: "stuck drafting")`,
        ),
    );
    expect(rig.pageErrors).toEqual([]);
    expect(rig.policyViolations).toEqual([]);
  });

  it('answers the cancel route 404 for no instance, 409 once it ended, 400 naming the field, and 403 without its header', async () => {
    expect((await cancelCall(randomUUID(), {})).status).toBe(404);
    const ended = await cancelCall(finishedId, { reason: 'too late' });
    expect(ended.status).toBe(409);
    expect(((await ended.json()) as { message: string }).message).toContain('has ended');
    for (const [path, body, field] of [
      ['not-a-uuid', {}, 'id'],
      [finishedId, { reason: '' }, 'reason'],
      [finishedId, { reason: 'x'.repeat(501) }, 'reason'],
      [finishedId, { force: true }, 'force'],
    ] as const) {
      const answer = await cancelCall(path, body);
      expect({ path, body, status: answer.status }).toEqual({ path, body, status: 400 });
      const message = ((await answer.json()) as { message: string[] }).message;
      expect([message].flat().join('; ')).toContain(field);
    }
    // The state-changing guard: no header, or another site's origin, is refused before anything.
    const live = await startReview({ resource: 'db-guarded', usage: 10, draftMs: 60_000 });
    expect((await cancelCall(live, {}, {})).status).toBe(403);
    expect(
      (await cancelCall(live, {}, { ...CSRF, origin: 'https://elsewhere.example' })).status,
    ).toBe(403);
    expect((await instance(live)).status).toBe('running');
    expect((await (await cancelCall(live, {})).json()) as unknown).toEqual({ result: 'canceled' });
  });
});
