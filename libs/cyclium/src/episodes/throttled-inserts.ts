import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { CycliumDataSource } from '../database/cyclium-data-source.service.js';
import { Statement } from '../sql/statement.js';
import { BatchedWrites, type BatchAnswer } from './batched-writes.js';
import type { EpisodeRow } from './episode-context.interface.js';
import { episodeInput, insertEpisodes, insertOf, type NewEpisode } from './episode-inserts.js';
import { EpisodeSignatures } from './episode-signatures.js';
import { toEpisode } from './episode-store.js';

interface ThrottledInsert {
  id: string;
  spec: NewEpisode;
}

/**
 * The inserts of limited expectations' triggers as `throttled` rows, group-committed as fresh
 * begins are (BeginWrites): the triggers that arrive while one insert is in flight leave together
 * as one statement, and the dedupe index still decides each row (null: a duplicate).
 */
@Injectable()
export class ThrottledInserts {
  private readonly batches = new BatchedWrites<ThrottledInsert, EpisodeRow | null>(
    async (item) => (await this.written([item]))[0] ?? null,
    (items) => this.insertMany(items),
  );

  constructor(
    private readonly database: CycliumDataSource,
    private readonly signatures: EpisodeSignatures,
  ) {}

  /** Inserts `spec` as a throttled row; null when a live episode holds its dedupe key. */
  insert(spec: Omit<NewEpisode, 'status' | 'ownerNode'>): Promise<EpisodeRow | null> {
    return this.batches.write({
      id: randomUUID(),
      spec: { ...spec, status: 'throttled', ownerNode: null },
    });
  }

  private insertMany(items: ThrottledInsert[]): Promise<BatchAnswer<EpisodeRow | null>> {
    return this.written(items);
  }

  /** The rows of `items` in one statement, in order: null for each the dedupe index refused. */
  private async written(items: ThrottledInsert[]): Promise<Array<EpisodeRow | null>> {
    const statement = new Statement('episodes_throttled');
    const rows = items.map((item) =>
      this.signatures.signed(insertOf(item.id, item.spec, 'throttled')),
    );
    statement.with('ep', insertEpisodes(`(${episodeInput(statement, rows)})`));
    const { rows: written } = await this.database.sql.query(statement.build('SELECT * FROM ep'));
    const byId = new Map(written.map((row: Record<string, unknown>) => [row.id, toEpisode(row)]));
    return items.map((item) => byId.get(item.id) ?? null);
  }
}
