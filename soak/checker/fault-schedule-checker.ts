/**
 * The checker: after quiescence, judges a seed's history (the audit rows, the side effects, the
 * deliveries) against what the run accepted and what its faults could excuse. Each rule lives in
 * a file of its own; a violation names the rule, what was seen, and the episodes and events.
 */
import type { RunLog } from '../cluster/run-log.js';
import type { History } from './audit-reader.js';
import { CheckContext, type Violation } from './check-context.js';
import { checkLifecycleEvents } from './lifecycle-rules.js';
import { checkOutcomes } from './outcome-rules.js';
import { checkNodesAndQuiet, checkOutputs, checkRetention } from './scope-retention-rules.js';
import { checkTriggers } from './trigger-rules.js';

export type { Violation };

export function checkRun(log: RunLog, history: History): Violation[] {
  const ctx = new CheckContext(log, history);
  checkTriggers(ctx);
  checkOutcomes(ctx);
  checkLifecycleEvents(ctx);
  checkOutputs(ctx);
  checkRetention(ctx);
  checkNodesAndQuiet(ctx);
  return ctx.violations;
}
