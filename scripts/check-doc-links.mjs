#!/usr/bin/env node
// Checks every relative link of docs/**/*.md, README.md and libs/cyclium/README.md: the file it
// names exists, and its `#anchor`, if any, is a heading of that page (GitHub's slugs). External
// links (a scheme) are left alone.
//
//   node scripts/check-doc-links.mjs [repoRoot]      (npm run docs:links)
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));

function pages() {
  const found = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      // docs/api is typedoc's generated output.
      if (entry.isDirectory()) {
        if (path !== join(root, 'docs/api')) walk(path);
      } else if (entry.name.endsWith('.md')) found.push(path);
    }
  };
  if (existsSync(join(root, 'docs'))) walk(join(root, 'docs'));
  for (const page of ['README.md', 'libs/cyclium/README.md']) {
    if (existsSync(join(root, page))) found.push(join(root, page));
  }
  return found.sort();
}

/** Markdown text without its fenced code blocks (a `#` comment in a shell block is no heading). */
function prose(text) {
  return text.replace(/^(\s*)(```|~~~)[\s\S]*?^\1\2\s*$/gm, (block) => block.replace(/[^\n]/g, ''));
}

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to '-'. */
function anchors(file) {
  const seen = new Map();
  const result = new Set();
  for (const [, heading] of prose(readFileSync(file, 'utf8')).matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const base = heading
      .replace(/<[^>]+>/g, '')
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  return result;
}

const problems = [];
let links = 0;
const anchorCache = new Map();
for (const page of pages()) {
  const lines = prose(readFileSync(page, 'utf8')).split('\n');
  lines.forEach((line, i) => {
    for (const [, target] of line.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      links++;
      const [path, anchor] = target.split('#');
      const file = path ? resolve(dirname(page), decodeURIComponent(path)) : page;
      const where = `${relative(root, page).split(sep).join('/')}:${i + 1}`;
      if (!existsSync(file)) {
        problems.push(`${where}: ${target}: no such file`);
        continue;
      }
      if (anchor === undefined || statSync(file).isDirectory()) continue;
      if (!file.endsWith('.md')) continue;
      if (!anchorCache.has(file)) anchorCache.set(file, anchors(file));
      if (!anchorCache.get(file).has(anchor)) {
        problems.push(`${where}: ${target}: no heading with the anchor #${anchor}`);
      }
    }
  });
}
for (const problem of problems) console.error(problem);
console.log(`doc links: ${links} relative link(s), ${problems.length} problem(s)`);
process.exit(problems.length ? 1 : 0);
