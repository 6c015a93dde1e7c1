/**
 * One node of the fault-schedule soak: a Nest application context with its own CycliumModule and
 * TypeORM pool, hosting the actors its config names, driven by commands (NodeCommand) over a
 * channel that is a worker thread's port or a child process's IPC. Every connection it opens
 * carries its `appName`, so the driver can end them server-side when it "kills" the node.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  Bus,
  CycliumModule,
  Episodes,
  Mode,
  NodeIdentity,
  isDatabaseUnavailable,
  type CycliumOptions,
} from '@cyclium/nestjs';
import {
  AlphaActor,
  BetaActor,
  FaultWork,
  LegacyAlphaActor,
  ReportAdapter,
} from './fault-actors.js';
import { LifecycleWatcher } from './lifecycle-watcher.js';
import type { FaultNodeConfig, NodeAnswer, NodeCommand, NodeMessage } from './node-protocol.js';

export interface NodeChannel {
  send(message: NodeMessage): void;
  onCommand(handler: (id: number, command: NodeCommand) => void): void;
}

function cycliumOptions(config: FaultNodeConfig): CycliumOptions {
  const t = config.timings;
  const w = config.windows;
  return {
    nodeIdentity: config.nodeId,
    env: config.env,
    stackSlug: config.stack,
    mode: config.mode,
    workClaims: config.claims ? 'postgres' : false,
    workClaimsLeaseSeconds: t.leaseSeconds,
    jitterMs: 0,
    nodeBeatIntervalMs: t.beatMs,
    triggerPollIntervalMs: t.pollMs,
    triggerPollIdleIntervalMs: t.idlePollMs,
    busPollIntervalMs: t.busPollMs,
    episodeShutdownMs: t.shutdownMs,
    triggerRequestTtlMs: t.triggerRequestTtlMs,
    outputRetryBaseMs: t.outputRetryBaseMs,
    recovery: {
      settleMs: t.settleMs,
      staleAfterMs: t.staleAfterMs,
      intervalMs: t.sweepIntervalMs,
      notHostedGraceMs: t.notHostedGraceMs,
    },
    ...(w
      ? {
          busRetentionMs: w.busRetentionMs,
          busUndispatchedMaxAgeMs: w.busUndispatchedMaxAgeMs,
          retention: {
            archiveAfter: w.archiveAfter,
            deleteAfter: w.deleteAfter,
            intervalMs: w.intervalMs,
          },
        }
      : {}),
  };
}

function nodeModule(config: FaultNodeConfig) {
  const providers: Provider[] = [];
  if (config.actors.includes('fs_alpha'))
    providers.push(config.legacyAlpha ? LegacyAlphaActor : AlphaActor);
  if (config.actors.includes('fs_beta')) providers.push(BetaActor);
  if (config.lifecycleReaders) providers.push(LifecycleWatcher);
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: config.databaseUrl,
        applicationName: config.appName,
        extra: { max: 4, application_name: config.appName },
      }),
      CycliumModule.forRoot(cycliumOptions(config)),
    ],
    providers: [FaultWork, ReportAdapter, ...providers],
  })
  class FaultNodeModule {}
  return FaultNodeModule;
}

function failure(error: unknown): NodeAnswer {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return { ok: false, error: text.slice(0, 500), unavailable: isDatabaseUnavailable(error) };
}

/** The library's retention schedule, which it does not export: found next to its compiled entry. */
async function retentionPass(app: INestApplicationContext): Promise<string> {
  const entry = createRequire(import.meta.url).resolve('@cyclium/nestjs');
  const file = pathToFileURL(join(dirname(entry), 'retention', 'retention.service.js')).href;
  const { RetentionSchedule } = (await import(file)) as {
    RetentionSchedule?: new (...args: never[]) => unknown;
  };
  const parts: string[] = [];
  if (RetentionSchedule) {
    const schedule = app.get(RetentionSchedule) as { passNow?: () => Promise<unknown> };
    if (schedule.passNow) parts.push(`episodes ${JSON.stringify(await schedule.passNow())}`);
  }
  const bus = app.get(Bus) as Bus & { pruneNow?: () => Promise<number> };
  if (bus.pruneNow) parts.push(`events pruned ${await bus.pruneNow()}`);
  return parts.join('; ');
}

async function run(app: INestApplicationContext, command: NodeCommand): Promise<NodeAnswer> {
  switch (command.cmd) {
    case 'trigger': {
      const options = {
        ...(command.dedupeKey ? { dedupeKey: command.dedupeKey } : {}),
        ...(command.delayMs !== undefined ? { delayMs: command.delayMs } : {}),
        ...(command.runAt !== undefined ? { runAt: new Date(command.runAt) } : {}),
        ...(command.retryAttempts !== undefined
          ? {
              retry: {
                attempts: command.retryAttempts,
                backoff: { initialMs: command.retryBackoffMs ?? 300 },
              },
            }
          : {}),
      };
      const result = await app
        .get(Episodes)
        .trigger(command.actor, command.expectation, command.payload, options);
      return {
        ok: true,
        status: result.status,
        episodeId: 'episode' in result ? result.episode.id : null,
      };
    }
    case 'publish': {
      const event = await app
        .get(Bus)
        .publish(command.type, command.payload, { eventId: command.eventId });
      return { ok: true, status: 'stored', detail: event.eventId };
    }
    case 'cancel':
      return { ok: true, status: await app.get(Episodes).cancel(command.episodeId) };
    case 'mode':
      app.get(Mode).set(command.mode);
      return { ok: true, status: command.mode };
    case 'actor_mode':
      if (command.mode === null) app.get(Mode).clearActorOverride(command.actor);
      else app.get(Mode).setActorOverride(command.actor, command.mode);
      return { ok: true, status: command.mode ?? 'cleared' };
    case 'retention':
      return { ok: true, status: 'ran', detail: await retentionPass(app) };
    case 'drain':
      await app.close();
      return { ok: true, status: 'drained' };
  }
}

/** Boots the node and serves commands until it drains (or its host kills it); null when it could not boot. */
export async function startFaultNode(
  config: FaultNodeConfig,
  channel: NodeChannel,
): Promise<INestApplicationContext | null> {
  let app: INestApplicationContext;
  try {
    app = await NestFactory.createApplicationContext(nodeModule(config), {
      logger: ['error', 'warn', 'log'],
    });
  } catch (error) {
    const name = error instanceof Error ? error.name : 'Error';
    channel.send({
      type: 'boot_failed',
      error: error instanceof Error ? error.message : String(error),
      errorName: name,
    });
    return null;
  }
  channel.onCommand((id, command) => {
    run(app, command).then(
      (answer) => {
        channel.send({ type: 'answer', id, answer });
        if (command.cmd === 'drain') channel.send({ type: 'drained' });
      },
      (error: unknown) => channel.send({ type: 'answer', id, answer: failure(error) }),
    );
  });
  channel.send({ type: 'ready', identity: app.get(NodeIdentity).name() });
  return app;
}
