/**
 * Reads a seed's history back from its database: the audit rows grouped by what they are about
 * (episodes with their journal, outputs and trigger requests; events), the actors' side effects
 * and the output deliveries.
 */
import pg from 'pg';
import type { WorkPayload } from '../node/node-protocol.js';

export interface AuditRow {
  id: number;
  at: number;
  tx: string;
  tbl: string;
  op: 'INSERT' | 'UPDATE' | 'DELETE';
  key: string | null;
  status: string | null;
  oldStatus: string | null;
  row: Record<string, unknown>;
}

export interface EpisodeHistory {
  id: string;
  actor: string;
  expectation: string;
  triggerType: string;
  eventId: string | null;
  payload: WorkPayload;
  dedupeKey: string | null;
  env: string | null;
  stack: string | null;
  insertedAt: number;
  /** The episode's own rows, oldest first (insert, changes, delete). */
  rows: AuditRow[];
  journal: AuditRow[];
  outputs: AuditRow[];
  requests: AuditRow[];
  last: Record<string, unknown>;
  deletedAt: number | null;
}

export interface EventHistory {
  eventId: string;
  type: string;
  payload: WorkPayload;
  env: string | null;
  stack: string | null;
  createdAt: number;
  deletedAt: number | null;
  deleteTx: string | null;
}

export interface Effect {
  at: number;
  episodeId: string;
  stepNo: number;
  kind: 'done' | 'throw';
  node: string;
}

export interface Delivery {
  at: number;
  outputId: string;
  episodeId: string;
  node: string;
  env: string | null;
  stack: string | null;
}

export interface History {
  episodes: Map<string, EpisodeHistory>;
  events: Map<string, EventHistory>;
  effects: Effect[];
  deliveries: Delivery[];
  /** Audit rows about episodes that never had an audited insert (should not happen). */
  strays: AuditRow[];
}

const time = (value: unknown): number => new Date(value as string).getTime();

/** A column of an audited row as text ('' for null). */
export function text(value: unknown): string {
  if (value === null || value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function episodeFrom(insert: AuditRow): EpisodeHistory {
  const row = insert.row;
  const ref = (row.trigger_ref ?? {}) as { payload?: WorkPayload; eventId?: string };
  return {
    id: row.id as string,
    actor: row.actor_id as string,
    expectation: row.expectation_id as string,
    triggerType: row.trigger_type as string,
    eventId: ref.eventId ?? null,
    payload: ref.payload ?? ({ op: '?', steps: 0, stepMs: 0 } as WorkPayload),
    dedupeKey: (row.dedupe_key as string | null) ?? null,
    env: (row.source_env as string | null) ?? null,
    stack: (row.source_stack as string | null) ?? null,
    insertedAt: insert.at,
    rows: [],
    journal: [],
    outputs: [],
    requests: [],
    last: row,
    deletedAt: null,
  };
}

export async function readHistory(databaseUrl: string): Promise<History> {
  const db = new pg.Client({ connectionString: databaseUrl });
  db.on('error', () => undefined);
  await db.connect();
  try {
    const audit = await db.query(
      `SELECT id, at, tx::text AS tx, tbl, op, key, status, old_status, row FROM fs_audit ORDER BY id`,
    );
    const effects = await db.query(
      `SELECT at, episode_id, step_no, kind, node FROM fs_effects ORDER BY id`,
    );
    const deliveries = await db.query(
      `SELECT at, output_id, episode_id, node, env, stack FROM fs_deliveries ORDER BY id`,
    );
    const history: History = {
      episodes: new Map(),
      events: new Map(),
      effects: [],
      deliveries: [],
      strays: [],
    };
    for (const r of audit.rows) {
      const row: AuditRow = {
        id: Number(r.id),
        at: time(r.at),
        tx: r.tx,
        tbl: r.tbl,
        op: r.op,
        key: r.key,
        status: r.status,
        oldStatus: r.old_status,
        row: r.row,
      };
      if (row.tbl === 'cyclium_events') {
        addEvent(history, row);
        continue;
      }
      if (row.tbl === 'cyclium_episodes' && row.op === 'INSERT')
        history.episodes.set(row.key as string, episodeFrom(row));
      const episode = history.episodes.get(row.key as string);
      if (!episode) {
        history.strays.push(row);
        continue;
      }
      if (row.tbl === 'cyclium_episodes') {
        episode.rows.push(row);
        episode.last = row.row;
        if (row.op === 'DELETE') episode.deletedAt = row.at;
      } else if (row.tbl === 'cyclium_episode_steps') episode.journal.push(row);
      else if (row.tbl === 'cyclium_outputs') episode.outputs.push(row);
      else if (row.tbl === 'cyclium_trigger_requests') episode.requests.push(row);
    }
    history.effects = effects.rows.map((r) => ({
      at: time(r.at),
      episodeId: r.episode_id,
      stepNo: r.step_no,
      kind: r.kind,
      node: r.node,
    }));
    history.deliveries = deliveries.rows.map((r) => ({
      at: time(r.at),
      outputId: r.output_id,
      episodeId: r.episode_id,
      node: r.node,
      env: r.env,
      stack: r.stack,
    }));
    return history;
  } finally {
    await db.end();
  }
}

function addEvent(history: History, row: AuditRow): void {
  const id = row.key as string;
  if (row.op === 'INSERT') {
    history.events.set(id, {
      eventId: id,
      type: row.row.type as string,
      payload: row.row.payload as WorkPayload,
      env: (row.row.source_env as string | null) ?? null,
      stack: (row.row.source_stack as string | null) ?? null,
      createdAt: time(row.row.created_at),
      deletedAt: null,
      deleteTx: null,
    });
  } else if (row.op === 'DELETE') {
    const event = history.events.get(id);
    if (event) {
      event.deletedAt = row.at;
      event.deleteTx = row.tx;
    }
  }
}
