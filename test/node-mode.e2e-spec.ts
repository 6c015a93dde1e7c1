import { afterAll, describe, expect, it } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { Mode } from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Peers rank only nodes whose row says they take triggers, so a runtime mode change must reach the row. */
describe('cyclium_nodes.mode follows Mode.set', () => {
  const database = useDatabase();
  let app: INestApplicationContext | undefined;

  afterAll(async () => {
    await app?.close();
  });

  const modeInRow = async () => (await database.db.query<{ mode: string }>(`SELECT mode FROM cyclium_nodes WHERE node_identity = 'mode-node'`)).rows[0]?.mode;

  it('writes each change at once, not at the next beat', async () => {
    // A beat a minute apart: only the change itself can write the row within the wait below.
    app = await startCycliumApp({ url: database.url, cyclium: { nodeIdentity: 'mode-node', nodeBeatIntervalMs: 60_000 }, providers: [] });
    expect(await modeInRow()).toBe('full');
    app.get(Mode).set('disabled');
    await waitFor('the row to say disabled', async () => (await modeInRow()) === 'disabled', 3_000);
    app.get(Mode).set('trigger_only');
    await waitFor('the row to say trigger_only', async () => (await modeInRow()) === 'trigger_only', 3_000);
  });
});
