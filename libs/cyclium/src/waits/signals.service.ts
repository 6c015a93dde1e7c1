import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { NodeIdentity } from '../identity/node-identity.service.js';
import { checkTriggerInput } from '../episodes/trigger-input.js';
import type { SignalResult } from '../episodes/wait.types.js';
import type { SqlExecutor } from '../sql/sql-executor.js';
import { isUuid } from '../sql/uuid.js';
import { SignalStore } from './signal-store.js';
import { activeTraceContext } from '../primitives/trace-context.js';

/**
 * `Episodes.signal`: a signal is a row, stored for a live episode whatever it is doing (a wait
 * that begins later takes it); when the episode waits for that name now, its wake-up moves to now
 * in the same transaction, so a node resumes it once this commits.
 */
@Injectable()
export class Signals {
  constructor(
    private readonly database: CycliumDataSource,
    private readonly identity: NodeIdentity,
  ) {}

  /** Through `client` (the host's open transaction) when given, else in one of its own. */
  async send(
    episodeId: string,
    name: string,
    payload: unknown,
    client?: SqlExecutor,
  ): Promise<SignalResult> {
    if (typeof name !== 'string' || name === '' || name.length > 200)
      throw new TypeError(
        `Episodes.signal: name must be a non-empty string of at most 200 characters (got ` +
          `${JSON.stringify(name)})`,
      );
    checkTriggerInput(`Episodes.signal("${name}")`, payload ?? null, undefined);
    if (!isUuid(episodeId)) return { status: 'not_found' };
    const payloadJson = JSON.stringify(payload ?? null);
    const traceContext = activeTraceContext();
    const send = async (sql: SqlExecutor): Promise<SignalResult> => {
      const sent = await SignalStore.send(
        sql,
        episodeId,
        name,
        payloadJson,
        this.identity.name(),
        traceContext,
      );
      if (!sent) return { status: 'not_found' };
      if (sent.signalId === null) return { status: 'finished' };
      const wanted =
        sent.status === 'waiting' &&
        sent.waitingFor?.kind === 'signal' &&
        sent.waitingFor.name === name;
      if (wanted) await SignalStore.wake(sql, episodeId, sent);
      return { status: 'sent', signalId: sent.signalId, woke: wanted };
    };
    return client ? send(client) : this.database.transaction(send);
  }
}
