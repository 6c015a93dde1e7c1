/**
 * The nodes of one seed, by slot: boots them (a supervisor boots a slot again, a second later,
 * when it exits on its own while it is wanted up), kills and drains them on the schedule's word,
 * and logs every boot, exit and mode change for the checker.
 */
import type { CycliumMode } from '@cyclium/nestjs';
import type { Writable } from 'node:stream';
import type { ActorId, FaultNodeConfig } from '../node/node-protocol.js';
import type { SeedSetup, SlotSetup } from '../schedule/schedule.js';
import { NodeHandle, terminateBackends, type NodeExit } from './node-handle.js';
import type { RunLog } from './run-log.js';

const SUPERVISOR_DELAY_MS = 1_000;

interface Slot {
  setup: SlotSetup;
  generation: number;
  incarnation: number;
  nodeId: string;
  handle: NodeHandle | undefined;
  /** The supervisor keeps it up (boots it again after an exit nobody asked for). */
  wanted: boolean;
  mode: CycliumMode;
  overrides: Partial<Record<ActorId, CycliumMode>>;
}

export class FaultCluster {
  private readonly slots: Slot[];
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(
    private readonly setup: SeedSetup,
    private readonly databaseUrl: string,
    private readonly log: RunLog,
    private readonly output: Writable,
  ) {
    this.slots = setup.slots.map((s) => ({
      setup: s,
      generation: 0,
      incarnation: 0,
      nodeId: `fs${setup.seed}-${s.slot}-g0`,
      handle: undefined,
      wanted: false,
      mode: 'full',
      overrides: {},
    }));
  }

  /** Boots every slot and waits for them (up to `timeoutMs`). */
  async bootAll(timeoutMs: number): Promise<void> {
    for (const slot of this.slots) this.boot(slot.setup.slot, 'same');
    await this.whenAllUp(timeoutMs);
  }

  /** Resolves once every wanted slot is up, or `timeoutMs` passed (false then). */
  async whenAllUp(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.slots.every((s) => !s.wanted || s.handle?.up)) return true;
      await new Promise((r) => setTimeout(r, 100));
    }
    return false;
  }

  isUp(slot: number): boolean {
    return this.slots[slot]?.handle?.up ?? false;
  }

  /** The handle of `slot` when it is up; else another up slot that hosts `actor` (any up slot without one). */
  nodeFor(
    slot: number,
    actor?: ActorId,
  ): { slot: number; handle: NodeHandle; nodeId: string } | null {
    const chosen = this.slots[slot];
    const usable = (s: Slot) =>
      s.handle?.up && !s.setup.outsider && (!actor || s.setup.actors.includes(actor));
    const pick = chosen?.handle?.up ? chosen : this.slots.find(usable);
    if (!pick?.handle) return null;
    return { slot: pick.setup.slot, handle: pick.handle, nodeId: pick.nodeId };
  }

  nodeIdOf(slot: number): string {
    return (this.slots[slot] as Slot).nodeId;
  }

  mainSlots(): number[] {
    return this.slots.filter((s) => !s.setup.outsider).map((s) => s.setup.slot);
  }

  /** Starts a node in `slot` (a new generation's identity for `new`); does not wait for it. */
  boot(slotNo: number, identity: 'same' | 'new'): void {
    const slot = this.slots[slotNo] as Slot;
    slot.wanted = true;
    if (slot.handle?.alive) return;
    if (identity === 'new') slot.generation++;
    slot.nodeId = `fs${this.setup.seed}-${slotNo}-g${slot.generation}`;
    slot.incarnation++;
    slot.mode = 'full';
    slot.overrides = {};
    const config: FaultNodeConfig = {
      databaseUrl: this.databaseUrl,
      nodeId: slot.nodeId,
      appName: `${slot.nodeId}#${slot.incarnation}`,
      env: slot.setup.env,
      stack: slot.setup.stack,
      actors: slot.setup.actors,
      legacyAlpha: slot.setup.legacyAlpha,
      claims: this.setup.claims,
      lifecycleReaders: this.setup.lifecycleReaders,
      mode: 'full',
      timings: this.setup.timings,
      windows: this.setup.windows,
    };
    const handle = new NodeHandle(config, this.setup.processes ? 'process' : 'worker', this.output);
    slot.handle = handle;
    this.log.nodes.push({
      at: Date.now(),
      slot: slotNo,
      nodeId: slot.nodeId,
      appName: config.appName,
      event: 'boot',
    });
    handle.ready.then(
      () => {
        this.log.nodes.push({
          at: Date.now(),
          slot: slotNo,
          nodeId: slot.nodeId,
          appName: config.appName,
          event: 'ready',
        });
        this.changed();
      },
      () => undefined,
    );
    void handle.exited.then((exit) => this.onExit(slot, handle, exit));
  }

  /** kill -9 of `slot`'s node; resolves once it is gone. */
  async kill(slotNo: number): Promise<string | null> {
    const slot = this.slots[slotNo] as Slot;
    slot.wanted = false;
    const handle = slot.handle;
    if (!handle?.alive) return null;
    await handle.kill((appName) => terminateBackends(this.databaseUrl, appName));
    return slot.nodeId;
  }

  /** SIGTERM of `slot`'s node; resolves once it drained and exited. */
  async drain(slotNo: number): Promise<string | null> {
    const slot = this.slots[slotNo] as Slot;
    slot.wanted = false;
    const handle = slot.handle;
    if (!handle?.alive) return null;
    await handle.drain();
    return slot.nodeId;
  }

  /** Sets a node's mode (or one actor's override; null clears it) and logs it; false when the node is not up. */
  async setMode(
    slotNo: number,
    mode: CycliumMode,
    actor?: ActorId | null,
    clear = false,
  ): Promise<boolean> {
    const slot = this.slots[slotNo] as Slot;
    const handle = slot.handle;
    if (!handle?.up) return false;
    const answer = actor
      ? await handle.command({ cmd: 'actor_mode', actor, mode: clear ? null : mode })
      : await handle.command({ cmd: 'mode', mode });
    if (!answer.ok) return false;
    if (!actor) slot.mode = mode;
    else if (clear) delete slot.overrides[actor];
    else slot.overrides[actor] = mode;
    this.changed();
    return true;
  }

  /** Every node back to full with no overrides. */
  async allFull(): Promise<void> {
    for (const slot of this.slots) {
      if (!slot.handle?.up) continue;
      for (const actor of Object.keys(slot.overrides) as ActorId[])
        await this.setMode(slot.setup.slot, 'full', actor, true);
      if (slot.mode !== 'full') await this.setMode(slot.setup.slot, 'full');
    }
  }

  /** Boots every slot that is down (the end of a schedule: the cluster comes back whole). */
  bootMissing(): void {
    for (const slot of this.slots) if (!slot.handle?.alive) this.boot(slot.setup.slot, 'same');
  }

  /** Ends every node (drains when `drain`, else kill -9) and stops the supervisor. */
  async stopAll(drain: boolean): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const slot of this.slots) slot.wanted = false;
    await Promise.all(
      this.slots.map((s) => (drain ? this.drain(s.setup.slot) : this.kill(s.setup.slot))),
    );
  }

  private onExit(slot: Slot, handle: NodeHandle, exit: NodeExit): void {
    const record = {
      at: Date.now(),
      slot: slot.setup.slot,
      nodeId: handle.config.nodeId,
      appName: handle.config.appName,
    };
    this.log.nodes.push({
      ...record,
      event: 'exit',
      exit,
      ...(exit.requested ? {} : { tail: handle.tail() }),
    });
    this.changed();
    if (exit.requested || !slot.wanted || slot.handle !== handle) return;
    // Like a supervisor: a node that ended on its own is started again (the same identity), soon.
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (slot.wanted && slot.handle === handle) this.boot(slot.setup.slot, 'same');
    }, SUPERVISOR_DELAY_MS);
    this.timers.add(timer);
  }

  private changed(): void {
    const nodes = this.slots
      .filter((s) => s.handle?.up)
      .map((s) => ({
        slot: s.setup.slot,
        nodeId: s.nodeId,
        env: s.setup.env,
        stack: s.setup.stack,
        actors: s.setup.actors,
        mode: s.mode,
        legacyAlpha: s.setup.legacyAlpha,
        overrides: { ...s.overrides },
      }));
    this.log.availability.push({ at: Date.now(), nodes });
  }
}
