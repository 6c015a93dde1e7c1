import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { startNodeProcess, type DemoNode } from './support/demo-node.js';
import { useDatabase } from './support/database.js';
import { OpsBrowserRig } from './support/ops-browser.js';
import { waitFor } from './support/wait-for.js';

const WAITS_NODE = fileURLToPath(new URL('./fixtures/dist/waits-node.js', import.meta.url));

/**
 * The operations page of a real waits-node, in headless Chromium: a waiting episode's row says
 * what it waits for and until when, its detail lists a children wait's children, and the detail's
 * form sends a signal that resumes the episode.
 */
describe('waits on the operations page', () => {
  const database = useDatabase();
  let node: DemoNode | undefined;
  let page: Page;
  const rig = new OpsBrowserRig<DemoNode>();

  beforeAll(async () => {
    await database.db.query(`CREATE TABLE wait_runs (episode_id uuid, what text)`);
    ({ node, page } = await rig.start(
      startNodeProcess(WAITS_NODE, database.url, {
        env: { CYCLIUM_NODE_ID: 'ops-waits' },
        ready: async (n) => (await n.get<{ status: string }>('/health')).status === 'ok',
      }),
    ));
  });

  afterAll(() => rig.close({ signal: 'SIGKILL' }));

  const trigger = async (what: string, payload: object) => {
    const response = await fetch(`http://127.0.0.1:${node?.port}/trigger/${what}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    return ((await response.json()) as { episodeId: string }).episodeId;
  };
  const statusOf = async (id: string) =>
    (
      await database.db.query<{ status: string; result: unknown }>(
        `SELECT status, result FROM cyclium_episodes WHERE id = $1`,
        [id],
      )
    ).rows[0];
  const row = (id: string) => page.locator(`[data-testid="episode-row"][data-episode-id="${id}"]`);
  const shows = (what: string, probe: () => Promise<boolean>) => waitFor(what, probe, 15_000, 100);

  it('shows the wait in the row and the detail, and sends a signal from the detail', async () => {
    const approval = await trigger('approvals/approve', { timeoutMs: 600_000 });
    const parent = await trigger('fanout/parent', { n: 2, workMs: 60_000 });
    await waitFor(
      'both to wait',
      async () =>
        (await statusOf(approval))?.status === 'waiting' &&
        (await statusOf(parent))?.status === 'waiting',
    );
    await page.goto(`http://127.0.0.1:${node?.port}/ops`);
    await shows('the approval to show its wait', async () =>
      /waits for signal "approve", until/.test((await row(approval).textContent()) ?? ''),
    );
    await shows('the parent to show its children wait', async () =>
      /waits for 2 children, no deadline/.test((await row(parent).textContent()) ?? ''),
    );

    await row(parent).click();
    await shows(
      'the detail to list both children',
      async () => (await page.locator('[data-testid="detail-children"] li').count()) === 2,
    );

    await row(approval).click();
    await page.getByTestId('signal-form').waitFor();
    const typed = '{"by":"from-the-page"}';
    await page.getByTestId('signal-payload').fill(typed);
    await shows(
      'the payload typed in the form',
      async () => (await page.getByTestId('signal-payload').inputValue()) === typed,
    );
    await page.getByTestId('signal-send').click();
    await shows(
      'the episode to end with the signal the page sent',
      async () => (await statusOf(approval))?.status === 'done',
    );
    // With the signals stored, so that a failure says what the page sent.
    const { rows: signals } = await database.db.query(
      `SELECT name, payload FROM cyclium_signals WHERE episode_id = $1 ORDER BY id`,
      [approval],
    );
    expect({ result: (await statusOf(approval))?.result, signals }).toEqual({
      result: { first: 'from-the-page' },
      signals: [{ name: 'approve', payload: { by: 'from-the-page' } }],
    });
    await shows(
      'the row to show it done',
      async () => (await row(approval).getAttribute('data-status')) === 'done',
    );
    expect(rig.pageErrors).toEqual([]);
  });
});
