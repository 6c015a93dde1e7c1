import { describe, expect, it } from '@jest/globals';
import diagnosticsChannel from 'node:diagnostics_channel';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { resolveCycliumOptions } from '../options/resolve-options.js';
import { onCyclium } from './on-cyclium.js';
import { CycliumTelemetry } from './telemetry.service.js';

const telemetry = new CycliumTelemetry(
  new NodeIdentity(resolveCycliumOptions({ nodeIdentity: 'node-t' })),
);

describe('telemetry', () => {
  it(
    'delivers events to onCyclium handlers, stamped with the owner node, until ' + 'unsubscribed',
    () => {
      const seen: unknown[] = [];
      const unsubscribe = onCyclium('drain.completed', (event) => seen.push(event));
      telemetry.emit('drain.completed', { stamped: 5, killed: 1 });
      unsubscribe();
      telemetry.emit('drain.completed', { stamped: 9, killed: 9 });
      expect(seen).toEqual([{ ownerNode: 'node-t', stamped: 5, killed: 1 }]);
    },
  );

  it('publishes on the cyclium:<area>:<event> channel', () => {
    const seen: unknown[] = [];
    const listener = (message: unknown) => seen.push(message);
    diagnosticsChannel.subscribe('cyclium:work_claims:steal', listener);
    telemetry.emit('work_claims.steal', { dedupeKey: 'k', fence: 2, durationMs: 1 });
    diagnosticsChannel.unsubscribe('cyclium:work_claims:steal', listener);
    expect(seen).toEqual([{ ownerNode: 'node-t', dedupeKey: 'k', fence: 2, durationMs: 1 }]);
  });
});
