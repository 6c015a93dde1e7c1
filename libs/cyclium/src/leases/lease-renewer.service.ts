import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { CYCLIUM_CLAIMS_ADAPTER, CYCLIUM_OPTIONS } from '../cyclium.constants.js';
import { OutageLog } from '../sql/database-errors.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import type { ResolvedCycliumOptions } from '../options/cyclium-options.interface.js';
import { CycliumTelemetry } from '../telemetry/telemetry.service.js';
import { ClaimHold } from '../claims/claim-hold.js';
import type { HeldClaim, WorkClaimsAdapter } from '../claims/work-claims-adapter.interface.js';

const id = (key: string, fence: number | null) => `${fence}\u0000${key}`;

/**
 * One per node: every lease / 3 it renews all of this node's live claims in one adapter call
 * (one statement with the shipped adapter), and tells each holder whose claim did not come back
 * that it is lost. A failed tick (database unreachable) changes nothing; holders then fence
 * themselves on their local deadlines.
 */
@Injectable()
export class LeaseRenewer implements OnApplicationBootstrap {
  private readonly logger = new Logger('CycliumClaims');
  private readonly outage = new OutageLog(this.logger, 'claim renewal');
  private readonly holds = new Map<string, ClaimHold>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;

  constructor(
    @Inject(CYCLIUM_CLAIMS_ADAPTER) private readonly adapter: WorkClaimsAdapter | null,
    @Inject(CYCLIUM_OPTIONS) private readonly options: ResolvedCycliumOptions,
    private readonly identity: NodeIdentity,
    private readonly telemetry: CycliumTelemetry,
  ) {}

  get leaseMs(): number {
    return this.options.workClaimsLeaseSeconds * 1000;
  }

  onApplicationBootstrap(): void {
    if (!this.adapter) return;
    this.timer = setInterval(() => void this.tick(), this.leaseMs / 3);
    this.timer.unref();
  }

  /**
   * The last renewal round failed and there are still claims to renew; false again after one
   * succeeds.
   */
  get failing(): boolean {
    return this.outage.failing && [...this.holds.values()].some((hold) => !hold.lost);
  }

  /** Stops the timer and waits for a tick in flight. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.ticking;
  }

  /** Starts renewing a claim this node just acquired; `sentAt` is when the acquire was sent. */
  track(key: string, fence: number | null, sentAt: number): ClaimHold {
    const hold = new ClaimHold(key, fence, this.leaseMs, sentAt, (h) =>
      this.holds.delete(id(h.key, h.fence)),
    );
    if (fence !== null) this.holds.set(id(key, fence), hold);
    return hold;
  }

  /** The claims this node is renewing now. */
  held(): HeldClaim[] {
    return [...this.holds.values()].map((h) => ({ key: h.key, fence: h.fence as number }));
  }

  /** One renewal round; ticks never overlap. Exposed for tests and benchmarks. */
  tick(): Promise<void> {
    this.ticking ??= this.renewAll().finally(() => (this.ticking = undefined));
    return this.ticking;
  }

  private async renewAll(): Promise<void> {
    const adapter = this.adapter;
    if (!adapter) return;
    const live = [...this.holds.values()].filter((hold) => !hold.lost);
    if (live.length === 0) return;

    const owner = this.identity.name();
    const leaseSeconds = this.options.workClaimsLeaseSeconds;
    const claims = live.map((h) => ({ key: h.key, fence: h.fence as number }));
    const sentAt = performance.now();
    let renewed: HeldClaim[];
    try {
      renewed = adapter.renewMany
        ? await adapter.renewMany(owner, claims, leaseSeconds)
        : await renewOneByOne(adapter, owner, claims, leaseSeconds);
    } catch (error) {
      // Holders fence themselves on their local deadlines meanwhile; the next tick tries again.
      this.outage.failed(error);
      return;
    }
    this.outage.succeeded();
    const durationMs = performance.now() - sentAt;
    const kept = new Set(renewed.map((c) => id(c.key, c.fence)));
    for (const hold of live) {
      if (!this.holds.has(id(hold.key, hold.fence))) continue; // released while we were renewing
      if (kept.has(id(hold.key, hold.fence))) {
        // Read before `renewed` moves it: the deadline is the previous renewal's send plus the
        // lease.
        const lagMs = this.telemetry.wants('work_claims.renewed')
          ? Math.max(0, sentAt - hold.localDeadline + (2 * this.leaseMs) / 3)
          : undefined;
        hold.renewed(sentAt);
        this.telemetry.emit('work_claims.renewed', {
          dedupeKey: hold.key,
          fence: hold.fence,
          durationMs,
          lagMs,
        });
      } else {
        hold.markLost('not_owner');
        this.telemetry.emit('work_claims.renew_failed', {
          dedupeKey: hold.key,
          fence: hold.fence,
          durationMs,
        });
      }
    }
  }
}

async function renewOneByOne(
  adapter: WorkClaimsAdapter,
  owner: string,
  claims: HeldClaim[],
  leaseSeconds: number,
): Promise<HeldClaim[]> {
  const results = await Promise.all(
    claims.map((c) => adapter.renew(c.key, owner, leaseSeconds, c.fence)),
  );
  return claims.filter((_, i) => results[i] === 'ok');
}
