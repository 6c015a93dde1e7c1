import type { INestApplicationContext } from '@nestjs/common';
import { Bus } from '@cyclium/nestjs';
import { LifecycleDeclarations } from '../../libs/cyclium/src/cluster/lifecycle-declarations.service.js';

/**
 * Makes `app` a reader of the given terminal lifecycle events (a handler that ignores them) and
 * resolves once its node row says so: from then on every end in its stack and env writes them.
 * For tests that count those events; an end writes none that nobody reads.
 */
export async function readLifecycleEvents(
  app: INestApplicationContext,
  types: readonly string[] = ['episode.completed', 'episode.failed', 'episode.canceled'],
): Promise<() => void> {
  const offs = types.map((type) => app.get(Bus).subscribe(type, () => undefined));
  await app.get(LifecycleDeclarations).settled();
  return () => offs.forEach((off) => off());
}
