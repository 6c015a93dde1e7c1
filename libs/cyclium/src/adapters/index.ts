/**
 * `@cyclium/nestjs/adapters`: what the author of a custom bus or work-claims adapter needs, and the
 * shipped transports to compose or wrap. A host that only configures `bus` and `workClaims` by
 * name never imports from here.
 */
// The bus: the shipped transports, the optional durable seam, and the bounds every event keeps.
export { PostgresBus } from '../bus/postgres-bus.js';
export { busChannel } from '../bus/bus-channel.js';
export type { PostgresBusOptions } from '../bus/postgres-bus-options.interface.js';
export { LocalBus } from '../bus/local-bus.js';
export type { DurableEvents, EventScope } from '../bus/durable-events.interface.js';
export type { LifecycleReads } from '../bus/lifecycle-reads.interface.js';
export { DECLARED_LIFECYCLE_TYPES } from '../bus/lifecycle-reads.interface.js';
export type {
  DurableHandler,
  DurableSubscriptions,
  EventReceipt,
} from '../bus/durable-subscriptions.interface.js';
export type { DispatchSignals } from '../bus/dispatch-signals.interface.js';
export type { BusStatus } from '../bus/bus-status.interface.js';
export { MAX_EVENT_ID_CHARS, MAX_EVENT_TYPE_CHARS } from '../bus/event-bounds.js';
export { TERMINAL_EVENTS } from '../episodes/episode-events.js';

// SQL composition: the statements a durable bus or an in-database claims adapter joins.
export type { SqlExecutor } from '../sql/sql-executor.js';
export type { Statement } from '../sql/statement.js';
export type { FencedStatement } from '../leases/claims-in-statement.js';

// Work claims: the shipped PostgreSQL adapter and the contract a custom one implements.
export { PostgresClaims } from '../claims/postgres-claims.adapter.js';
export type {
  AcquireOptions,
  AcquireResult,
  ClaimFragments,
  ClaimGrant,
  ClaimWriteResult,
  ExpiredClaim,
  HeldClaim,
  InTransactionClaims,
  WorkClaimsAdapter,
} from '../claims/work-claims-adapter.interface.js';
