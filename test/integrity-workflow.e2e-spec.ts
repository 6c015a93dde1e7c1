import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Injectable, type INestApplicationContext } from '@nestjs/common';
import {
  Actor,
  Expectation,
  Workflow,
  WorkflowEngine,
  WorkflowStep,
  type EpisodeContext,
} from '@cyclium/nestjs';
import { startCycliumApp } from './support/cyclium-app.js';
import { useDatabase } from './support/database.js';
import { waitFor } from './support/wait-for.js';

/** Steps wait until the test opens their gate. */
let openGate: () => void = () => undefined;
const gate = new Promise<void>((resolve) => (openGate = resolve));

@Injectable()
@Actor({ id: 'iw_worker' })
class GatedActor {
  @Expectation({ id: 'work', trigger: 'workflow' })
  async work(ep: EpisodeContext<{ label: string }>): Promise<void> {
    await ep.step('work', async () => {
      await gate;
      return ep.trigger.payload.label;
    });
  }
}

@Injectable()
@Workflow({ id: 'iw_two' })
class TwoSteps {
  @WorkflowStep({ actor: 'iw_worker', expectation: 'work' })
  first(): { label: string } {
    return { label: 'first' };
  }

  @WorkflowStep({ actor: 'iw_worker', expectation: 'work', after: ['first'] })
  second(): { label: string } {
    return { label: 'second' };
  }
}

const INTEGRITY = { keyId: 'k1', keys: { k1: 'workflow-integrity-secret-0123456789' } };

/**
 * A workflow instance's row (the `integrity` option) is signed at each advance: an instance whose
 * step states were edited while a step ran is failed, not advanced, when that step ends; an
 * untouched one goes on to its next step.
 */
describe('signed workflow instances', () => {
  const database = useDatabase();
  let app: INestApplicationContext;

  beforeAll(async () => {
    app = await startCycliumApp({
      url: database.url,
      cyclium: {
        nodeIdentity: 'iw-node',
        integrity: INTEGRITY,
        triggerPollIntervalMs: 200,
        recovery: { onBoot: false },
      },
      providers: [GatedActor, TwoSteps],
    });
  });

  afterAll(async () => {
    openGate();
    await app?.close();
  });

  it('an edited instance fails as tampered when its running step ends, and its next step never starts; an untouched one goes on', async () => {
    const engine = app.get(WorkflowEngine);
    const [edited, untouched] = [
      await engine.start('iw_two', {}),
      await engine.start('iw_two', {}),
    ];
    const running = () =>
      database.db.query(
        `SELECT count(*)::int AS n FROM cyclium_episodes WHERE workflow_instance_id = ANY($1::uuid[]) AND status = 'running'`,
        [[edited, untouched]],
      );
    await waitFor('both first steps running', async () => (await running()).rows[0].n === 2);
    // Someone marks the first step as done already, with a result of their own.
    await database.db.query(
      `UPDATE cyclium_workflow_instances SET step_states = jsonb_set(step_states, '{first,result}', '"forged"') WHERE id = $1`,
      [edited],
    );
    openGate();

    const status = async (id: string) =>
      (
        await database.db.query(
          `SELECT status, error FROM cyclium_workflow_instances WHERE id = $1`,
          [id],
        )
      ).rows[0];
    const failed = await waitFor('the edited instance to fail', async () =>
      (await status(edited))?.status === 'failed' ? status(edited) : null,
    );
    expect(failed.error).toMatch(/^tampered: cyclium_workflow_instances row .* not advanced$/);
    expect(
      (
        await waitFor('the untouched instance to finish', async () =>
          (await status(untouched))?.status === 'done' ? status(untouched) : null,
        )
      ).status,
    ).toBe('done');
    const steps = await database.db.query(
      `SELECT workflow_step_id FROM cyclium_episodes WHERE workflow_instance_id = $1 ORDER BY inserted_at`,
      [edited],
    );
    expect(steps.rows.map((r) => r.workflow_step_id)).toEqual(['first']);
  });
});
