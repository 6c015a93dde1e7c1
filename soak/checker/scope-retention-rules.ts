/**
 * Outputs of done episodes are delivered, each by a node of its own env and stack; retention
 * deletes nothing inside its window; no node ends unless a fault asked; the cluster went quiet.
 */
import type { AuditRow, EpisodeHistory } from './audit-reader.js';
import { CLOCK_SLACK_MS, iso, type CheckContext } from './check-context.js';

export function checkOutputs(ctx: CheckContext): void {
  for (const episode of ctx.history.episodes.values()) {
    const inserts = episode.outputs.filter((r) => r.op === 'INSERT');
    const wanted = episode.payload.outputs ?? 0;
    if (episode.last.status === 'done' && inserts.length !== wanted) {
      ctx.fail(
        'outputs-delivered',
        `${episode.id} ended done with ${inserts.length} of its ${wanted} outputs`,
        {
          episodes: [episode.id],
        },
      );
    }
    for (const insert of inserts) {
      const id = insert.row.id as string;
      const rows = episode.outputs.filter((r) => r.row.id === id && r.op !== 'DELETE');
      const status = rows[rows.length - 1]?.row.status;
      if (episode.last.status === 'done' && status !== 'delivered') {
        ctx.fail(
          'outputs-delivered',
          `output ${id} of done episode ${episode.id} ended ${String(status)}`,
          {
            episodes: [episode.id],
          },
        );
      }
      const env = (insert.row.source_env as string | null | undefined) ?? episode.env;
      const stack = (insert.row.source_stack as string | null | undefined) ?? episode.stack;
      for (const delivery of ctx.history.deliveries.filter((d) => d.outputId === id)) {
        if (delivery.env !== env || (stack !== null && delivery.stack !== stack)) {
          const message =
            `output ${id} of ${episode.id} (env ${env}, stack ${stack}) was delivered by ${delivery.node} ` +
            `of env ${delivery.env}, stack ${delivery.stack}`;
          ctx.fail('output-scope', message, { episodes: [episode.id] });
        }
      }
    }
  }
}

export function checkRetention(ctx: CheckContext): void {
  const windows = ctx.log.setup.windows;
  for (const episode of ctx.history.episodes.values()) {
    const archived = episode.rows.find((r) => r.row.archived_at);
    if (archived) {
      const finished = new Date(archived.row.finished_at as string).getTime();
      const archivedAt = new Date(archived.row.archived_at as string).getTime();
      if (!windows || archivedAt < finished + windows.archiveAfter - CLOCK_SLACK_MS) {
        const window = windows?.archiveAfter ?? 'a week';
        const message = `${episode.id} archived ${archivedAt - finished} ms after it finished (archiveAfter ${window})`;
        ctx.fail('retention-window', message, { episodes: [episode.id] });
      }
    }
    if (episode.deletedAt !== null) checkEpisodeDelete(ctx, episode, archived);
    for (const row of [...episode.journal, ...episode.outputs, ...episode.requests]) {
      if (row.op !== 'DELETE') continue;
      const withEpisode = episode.rows.some((r) => r.op === 'DELETE' && r.tx === row.tx);
      if (!withEpisode) {
        ctx.fail(
          'retention-window',
          `a ${row.tbl} row of ${episode.id} was deleted while its episode stayed`,
          {
            episodes: [episode.id],
          },
        );
      }
    }
  }
  for (const event of ctx.history.events.values()) {
    if (event.deletedAt === null) continue;
    const age = event.deletedAt - event.createdAt;
    if (!windows || age < windows.busRetentionMs - CLOCK_SLACK_MS) {
      const window = windows?.busRetentionMs ?? '1 h';
      const message = `event ${event.eventId} (${event.type}) deleted ${age} ms old (busRetentionMs ${window})`;
      ctx.fail('retention-window', message, { events: [event.eventId] });
    }
  }
}

function checkEpisodeDelete(
  ctx: CheckContext,
  episode: EpisodeHistory,
  archived: AuditRow | undefined,
): void {
  const windows = ctx.log.setup.windows;
  const archivedAt = archived ? new Date(archived.row.archived_at as string).getTime() : null;
  const deletedAt = episode.deletedAt as number;
  if (
    !windows ||
    archivedAt === null ||
    deletedAt < archivedAt + windows.deleteAfter - CLOCK_SLACK_MS
  ) {
    const since =
      archivedAt === null ? 'never archived' : `${deletedAt - archivedAt} ms after its archive`;
    const message = `${episode.id} deleted at ${iso(deletedAt)}, ${since}`;
    ctx.fail('retention-window', message, { episodes: [episode.id] });
  }
}

export function checkNodesAndQuiet(ctx: CheckContext): void {
  for (const node of ctx.log.nodes) {
    if (node.event !== 'exit' || node.exit?.requested) continue;
    const when = node.exit?.duringBoot ? 'while booting' : 'while running';
    const tail = (node.tail ?? []).slice(-6).join(' | ');
    ctx.fail(
      'no-unrequested-exit',
      `node ${node.appName} exited on its own ${when} at ${iso(node.at)}: ${node.exit?.reason} | ${tail}`,
    );
  }
  if (!ctx.log.quiesced)
    ctx.fail(
      'quiescence',
      'the cluster did not go quiet before the deadline (see the episodes left live)',
    );
  for (const error of ctx.log.harnessErrors) ctx.fail('harness', error);
  for (const stray of ctx.history.strays.slice(0, 5)) {
    ctx.fail(
      'audit',
      `an audit row of ${stray.tbl} about ${stray.key} with no audited episode insert`,
    );
  }
}
