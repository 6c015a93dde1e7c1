import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { HostTransactions } from '../database/host-transactions.service.js';
import { ActorDefinitionError } from '../discovery/actor-definition.error.js';
import type { EpisodeRow, EpisodeTrigger } from '../episodes/episode-context.interface.js';
import { EpisodeStore } from '../episodes/episode-store.js';
import { checkTriggerInput } from '../episodes/trigger-input.js';
import type { ChildSpec } from '../episodes/step-ports.interface.js';
import type { ChildStarter } from '../episodes/wait-ports.interface.js';
import type { ChildHandle } from '../episodes/wait.types.js';
import { scopeKey } from '../scope/scope-key.js';
import { Dispatcher } from './dispatcher.service.js';
import { activeTraceContext } from '../primitives/trace-context.js';

/**
 * `ep.startChild`: the child is triggered inside the parent's transaction step, deferred (any node
 * hosting its actor in full mode takes it once the step commits, as a trigger in a host's
 * transaction is), in its parent's stack and env, its trigger naming its parent. Its dedupe key is
 * the parent's id and the child's key, so a key used twice in one episode answers the first child.
 */
@Injectable()
export class ChildEpisodes implements ChildStarter {
  constructor(
    private readonly registry: ActorRegistry,
    private readonly dispatcher: Dispatcher,
    private readonly transactions: HostTransactions,
    private readonly store: EpisodeStore,
  ) {}

  async start(manager: EntityManager, parent: EpisodeRow, child: ChildSpec): Promise<ChildHandle> {
    const what = `ep.startChild(${child.actorId}.${child.expectationId})`;
    const expectation = this.registry.expectation(child.actorId, child.expectationId);
    if (!expectation)
      throw new ActorDefinitionError(
        `${what}: no actor ${child.actorId} with expectation ${child.expectationId} on this node`,
      );
    checkTriggerInput(what, child.payload, undefined);
    const client = await this.transactions.executor(manager, what);
    // The prefix is what the waits migration's trigger looks for at a child's end.
    const dedupeKey = scopeKey(`child:${parent.id}:${child.key}`, parent.sourceEnv);
    const traceContext = activeTraceContext();
    const trigger: EpisodeTrigger = {
      type: 'manual',
      payload: child.payload,
      parent: { episodeId: parent.id, key: child.key, detached: child.detached },
      ...(traceContext === undefined ? {} : { traceContext }),
    };
    const result = await this.dispatcher.dispatchInHost(client, expectation, trigger, {
      dedupeKey,
      sourceStack: parent.sourceStack,
      sourceEnv: parent.sourceEnv,
      delay: null,
    });
    const handle = (episodeId: string): ChildHandle => ({
      episodeId,
      actorId: child.actorId,
      expectationId: child.expectationId,
      key: child.key,
    });
    if (result.status === 'on_commit') return handle(result.episode.id);
    if (result.status === 'disabled')
      throw new ActorDefinitionError(`${what}: ${child.actorId} is disabled on this node`);
    const first = await this.store.liveIdByDedupeKey(client, dedupeKey);
    if (!first) throw new Error(`${what}: key "${child.key}" was taken, and its child is gone`);
    return handle(first);
  }
}
