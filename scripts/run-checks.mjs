#!/usr/bin/env node
// The static checks `npm test` runs after the build, two at a time: each is one busy thread, so on
// two cores two lanes take about half as long as one after another (ESLint alone is as long as the
// rest together). Each check's output is printed whole when it ends; the exit code is 1 when any
// check failed, after all of them have run.
//
//   node scripts/run-checks.mjs      (npm run checks)
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Two lanes of npm scripts, each run in order. ESLint reads the build's declarations, not the others' output. */
const LANES = [
  ['lint:code'],
  ['typecheck:tests', 'format:check', 'docs:examples', 'docs:links', 'docs:api'],
];

function run(script) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn('npm', ['run', '--silent', script], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.once('error', (error) => (output += `${error.message}\n`));
    child.once('close', (code, signal) => {
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      const ok = code === 0;
      const verdict = ok ? 'passed' : `FAILED (${signal ?? `exit ${code}`})`;
      process.stdout.write(`> npm run ${script}: ${verdict} in ${seconds} s\n${output}`);
      resolve(ok);
    });
  });
}

async function lane(scripts) {
  let ok = true;
  for (const script of scripts) ok = (await run(script)) && ok;
  return ok;
}

const results = await Promise.all(LANES.map(lane));
process.exitCode = results.every(Boolean) ? 0 : 1;
