/**
 * A seed's report: its setup, the faults it injected, and each violation with the audit trail of
 * every episode and event it names, then the command that replays the seed.
 */
import type { RunLog } from '../cluster/run-log.js';
import type { SeedResult } from '../seed-result.js';
import { text, type EpisodeHistory, type History } from './audit-reader.js';
import { iso } from './check-context.js';

function trail(history: History, episode: EpisodeHistory): string[] {
  const lines = [
    `  episode ${episode.id} ${episode.actor}.${episode.expectation} op ${episode.payload.op} ` +
      JSON.stringify(episode.payload),
  ];
  const rows = [...episode.rows, ...episode.journal, ...episode.outputs, ...episode.requests].sort(
    (a, b) => a.id - b.id,
  );
  for (const r of rows) {
    const row = r.row;
    if (r.tbl === 'cyclium_episodes') {
      const owner = `owner=${text(row.owner_node)} attempts=${text(row.attempts)}`;
      const state = `${text(row.status)} phase=${text(row.phase)} ${owner}`;
      const error = row.error_class
        ? ` error=${text(row.error_class)}: ${text(row.error_detail).slice(0, 160)}`
        : '';
      lines.push(
        `    ${iso(r.at)} episode ${r.op} ${state}${row.archived_at ? ' archived' : ''}${error}`,
      );
    } else if (r.tbl === 'cyclium_episode_steps') {
      lines.push(
        `    ${iso(r.at)} journal ${r.op} #${text(row.step_no)} ${text(row.kind)} ${text(row.name)}`,
      );
    } else if (r.tbl === 'cyclium_outputs') {
      lines.push(
        `    ${iso(r.at)} output ${r.op} ${text(row.id).slice(0, 8)} ${text(row.status)} owner=${text(row.owner_node)}`,
      );
    } else {
      const due = row.not_before ? ` due ${text(row.not_before).slice(11, 23)}` : '';
      lines.push(
        `    ${iso(r.at)} request ${r.op} ${text(row.status)} by=${text(row.claimed_by)}${due} ${text(row.error)}`,
      );
    }
  }
  for (const effect of history.effects.filter((e) => e.episodeId === episode.id)) {
    lines.push(`    ${iso(effect.at)} effect s${effect.stepNo} ${effect.kind} on ${effect.node}`);
  }
  for (const delivery of history.deliveries.filter((d) => d.episodeId === episode.id)) {
    lines.push(
      `    ${iso(delivery.at)} delivery ${delivery.outputId.slice(0, 8)} by ${delivery.node} ` +
        `(${delivery.env}/${delivery.stack})`,
    );
  }
  return lines.sort((a, b) =>
    a.startsWith('  episode') ? -1 : b.startsWith('  episode') ? 1 : a.localeCompare(b),
  );
}

/** What the runner did, in time order: faults, and node boots and exits. */
function timeline(log: RunLog): string[] {
  const entries: Array<[number, string]> = [];
  for (const f of log.faults)
    entries.push([
      f.at,
      `fault ${f.kind} ${f.nodeIds.join(',')} ${f.detail} (until ${iso(f.endAt)})`,
    ]);
  for (const n of log.nodes) {
    const exit = n.exit ? ` ${n.exit.reason}${n.exit.requested ? '' : ' NOT REQUESTED'}` : '';
    entries.push([n.at, `node ${n.event} ${n.appName}${exit}`]);
  }
  return entries.sort((a, b) => a[0] - b[0]).map(([at, text]) => `  ${iso(at)} ${text}`);
}

export function formatReport(result: SeedResult, history: History, log: RunLog): string {
  const lines = [
    `seed ${result.seed}: ${result.violations.length} violation(s), ${result.episodes} episodes, ` +
      `${result.workSent} operations sent`,
    `  processes ${result.processes}, claims ${result.claims}, ${result.layout}, outsider ${result.outsider}, ` +
      `short windows ${result.shortWindows}`,
    `  faults ${JSON.stringify(result.faults)}, quiesced ${result.quiesced}, ${Math.round(result.wallMs / 1000)} s`,
    `  replay: ${result.replay}`,
    '',
  ];
  for (const [i, v] of result.violations.entries()) {
    lines.push(`#${i + 1} [${v.rule}] ${v.message}`);
    for (const id of v.episodeIds) {
      const episode = history.episodes.get(id);
      if (episode) lines.push(...trail(history, episode));
    }
    for (const id of v.eventIds) {
      const event = history.events.get(id);
      if (!event) continue;
      const deleted = event.deletedAt === null ? '' : `, deleted ${iso(event.deletedAt)}`;
      lines.push(
        `  event ${id} ${event.type} written ${iso(event.createdAt)}${deleted} ${JSON.stringify(event.payload)}`,
      );
    }
    lines.push('');
  }
  lines.push('timeline:', ...timeline(log), '', `replay: ${result.replay}`);
  return `${lines.join('\n')}\n`;
}
