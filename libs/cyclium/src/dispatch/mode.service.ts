import { Inject, Injectable, Logger } from '@nestjs/common';
import { ActorRegistry } from '../actors/actor-registry.service.js';
import { UnknownActorError } from '../actors/unknown-actor.error.js';
import { CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { CycliumConfigError } from '../options/cyclium-config.error.js';
import type { CycliumMode, ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { MODES } from '../options/options.schema.js';

/** This node's mode and the per-actor overrides in force. */
export interface ModeStatus {
  nodeMode: CycliumMode;
  overrides: Record<string, CycliumMode>;
  nodeIdentity: string;
  /** Actors paused cluster-wide in this node's stack and env (ActorPauses), as last read. */
  paused: string[];
}

/**
 * What this node does with triggers, node-wide and per actor: `full` runs them here,
 * `trigger_only` creates the episode and defers its run to a full node (a trigger request),
 * `disabled` fires nothing. Starts from the `mode` option (`CYCLIUM_MODE`) and changes at runtime;
 * reads are memory only, so asking it costs nothing on the hot path.
 */
@Injectable()
export class Mode {
  private readonly logger = new Logger('CycliumDispatch');
  private nodeMode: CycliumMode;
  private readonly overrides = new Map<string, CycliumMode>();
  private paused = new Set<string>();
  private readonly listeners = new Set<(mode: CycliumMode) => void>();
  private readonly actorListeners = new Set<(actorId: string) => void>();

  constructor(
    @Inject(CYCLIUM_OPTIONS) options: ResolvedCycliumOptions,
    private readonly identity: NodeIdentity,
    private readonly registry: ActorRegistry,
  ) {
    this.nodeMode = options.mode;
  }

  /** The node-wide mode. */
  get current(): CycliumMode {
    return this.nodeMode;
  }

  /**
   * The mode that applies to `actorId`: its override, else the node's; an actor paused cluster-wide
   * that would run here is `trigger_only` (its triggers wait as requests with a due time, which
   * never expire, for the resume).
   */
  of(actorId: string): CycliumMode {
    const mode = this.overrides.get(actorId) ?? this.nodeMode;
    return mode === 'full' && this.paused.has(actorId) ? 'trigger_only' : mode;
  }

  /** Whether `actorId` is paused cluster-wide, as this node last read it. */
  isPaused(actorId: string): boolean {
    return this.paused.has(actorId);
  }

  /**
   * The actors paused cluster-wide in this node's scope (ActorPauses reads them): each whose state
   * changes is announced to the actor listeners, so a resumed actor's pumps look for its backlog.
   */
  setPaused(actorIds: Iterable<string>): void {
    const next = new Set(actorIds);
    const changed = [
      ...[...next].filter((id) => !this.paused.has(id)),
      ...[...this.paused].filter((id) => !next.has(id)),
    ];
    this.paused = next;
    for (const actorId of changed) {
      this.logger.log(
        `actor ${actorId} is ${next.has(actorId) ? 'paused' : 'resumed'} cluster-wide`,
      );
      this.actorChanged(actorId);
    }
  }

  /** Switches this node's mode at run time, in memory (the `mode` option sets it at boot). */
  set(mode: CycliumMode): void {
    this.nodeMode = checked(mode, 'Mode.set');
    this.logger.log(`node mode is now ${mode}`);
    for (const listener of this.listeners) listener(mode);
  }

  /**
   * Calls `listener` after each change of the node-wide mode; returns the function that stops it.
   */
  onChange(listener: (mode: CycliumMode) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Calls `listener` after each change of one actor's override (set or cleared); returns the
   * function that stops it.
   */
  onActorChange(listener: (actorId: string) => void): () => void {
    this.actorListeners.add(listener);
    return () => this.actorListeners.delete(listener);
  }

  /**
   * Throws UnknownActorError for an actor this node does not host: a typo would otherwise change
   * nothing, silently.
   */
  setActorOverride(actorId: string, mode: CycliumMode): void {
    if (typeof actorId !== 'string' || actorId === '')
      throw new CycliumConfigError(['Mode.setActorOverride: actorId must be a non-empty string']);
    const checkedMode = checked(mode, 'Mode.setActorOverride');
    // declares() runs the registry's discovery first, should this be called before its init.
    if (!this.registry.declares(actorId) || !this.registry.get(actorId)) {
      throw new UnknownActorError(
        actorId,
        'Mode.setActorOverride',
        this.registry.all().map((actor) => actor.id),
      );
    }
    this.overrides.set(actorId, checkedMode);
    this.actorChanged(actorId);
  }

  /** Drops the override of one actor: it follows the node's mode again. */
  clearActorOverride(actorId: string): void {
    if (this.overrides.delete(actorId)) this.actorChanged(actorId);
  }

  /** Drops every actor override. */
  clearAllOverrides(): void {
    const cleared = [...this.overrides.keys()];
    this.overrides.clear();
    for (const actorId of cleared) this.actorChanged(actorId);
  }

  private actorChanged(actorId: string): void {
    for (const listener of this.actorListeners) listener(actorId);
  }

  /** The node's mode, the actor overrides and this node's identity. */
  status(): ModeStatus {
    return {
      nodeMode: this.nodeMode,
      overrides: Object.fromEntries(this.overrides),
      nodeIdentity: this.identity.name(),
      paused: [...this.paused].sort(),
    };
  }
}

function checked(mode: CycliumMode, where: string): CycliumMode {
  if (!MODES.includes(mode))
    throw new CycliumConfigError([
      `${where}: mode must be one of: ${MODES.join(', ')} (got ${JSON.stringify(mode)})`,
    ]);
  return mode;
}
