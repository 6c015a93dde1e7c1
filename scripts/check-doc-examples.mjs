#!/usr/bin/env node
// Type-checks every ```ts block of docs/**/*.md and libs/cyclium/README.md against the library's
// source types (no build needed), strict, as ES modules with decorators on.
//
//   node scripts/check-doc-examples.mjs [repoRoot]      (npm run docs:examples)
//
// A block whose first line is `// src/<path>.ts` is a file of its page's example app: all such
// blocks of one page form one project, so relative imports (`./greeter.actor.js`) work. Every other
// block is a module of its own. Errors print as `docs/x.md:LINE: TSxxxx message`, LINE being the
// markdown line; the exit code is 1 when there is any.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
const src = join(root, 'libs/cyclium/src');
// Inside the repo, so that the examples resolve @nestjs/*, typeorm, rxjs from its node_modules.
const out = join(root, 'node_modules/.cache/doc-examples');

/** The markdown files that hold examples, relative to root, sorted. */
function pages() {
  const found = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== 'api' || dir !== join(root, 'docs')) walk(path); // docs/api: generated
      } else if (entry.name.endsWith('.md')) found.push(relative(root, path).split(sep).join('/'));
    }
  };
  if (existsSync(join(root, 'docs'))) walk(join(root, 'docs'));
  if (existsSync(join(root, 'libs/cyclium/README.md'))) found.push('libs/cyclium/README.md');
  return found.sort();
}

/** The ```ts blocks of one page: their text and the markdown line (1-based) of their first line. */
function blocks(text) {
  const lines = text.split(/\r?\n/);
  const result = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*(\S*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    let end = i + 1;
    while (
      end < lines.length &&
      !new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`).test(lines[end])
    )
      end++;
    if (lang === 'ts' || lang === 'typescript') {
      const body = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l));
      result.push({ line: i + 2, body });
    }
    i = end;
  }
  return result;
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'package.json'), '{ "type": "module", "private": true }\n');

/** Temp file (absolute) → { page, line }: where its first line sits in the markdown. */
const origin = new Map();
const problems = [];
let count = 0;
for (const page of pages()) {
  const slug = page.replace(/\.md$/, '').replace(/[^A-Za-z0-9]+/g, '_');
  blocks(readFileSync(join(root, page), 'utf8')).forEach((block, n) => {
    count++;
    const app = /^\/\/\s*(src\/\S+\.ts)\s*$/.exec(block.body[0] ?? '');
    const file = app ? join(out, slug, app[1]) : join(out, slug, `block-${n + 1}.ts`);
    if (origin.has(file)) {
      problems.push(
        `${page}:${block.line}: ${app[1]} is already a block of this page (line ` +
          `${origin.get(file).line}); one file per path`,
      );
      return;
    }
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, block.body.join('\n') + '\n');
    origin.set(file, { page, line: block.line });
  });
}

const options = {
  target: ts.ScriptTarget.ES2023,
  lib: ['lib.es2023.d.ts'],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  moduleDetection: ts.ModuleDetectionKind.Force, // a block without import/export is still a module
  types: ['node'],
  typeRoots: [join(root, 'node_modules/@types')],
  strict: true,
  strictPropertyInitialization: false, // as the library's tsconfig.base.json
  noImplicitOverride: true,
  useUnknownInCatchVariables: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  esModuleInterop: true,
  skipLibCheck: true,
  noEmit: true,
  // Like jest.config.js's moduleNameMapper: the examples see the source, not dist/.
  paths: {
    '@cyclium/nestjs': [join(src, 'index.ts')],
    '@cyclium/nestjs/*': [join(src, '*/index.ts')],
  },
};
const program = ts.createProgram([...origin.keys()], options);
const diagnostics = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics()];
for (const file of origin.keys()) {
  const sf = program.getSourceFile(file);
  diagnostics.push(...program.getSyntacticDiagnostics(sf), ...program.getSemanticDiagnostics(sf));
}
for (const d of diagnostics) {
  const message = ts.flattenDiagnosticMessageText(d.messageText, '\n    ');
  const at = d.file && origin.get(resolve(d.file.fileName));
  if (at) {
    const { line } = d.file.getLineAndCharacterOfPosition(d.start ?? 0);
    problems.push(`${at.page}:${at.line + line}: TS${d.code} ${message}`);
  } else {
    problems.push(`${d.file ? relative(root, d.file.fileName) : '(tsc)'}: TS${d.code} ${message}`);
  }
}

for (const p of problems) console.error(p);
const pageCount = new Set([...origin.values()].map((o) => o.page)).size;
console.log(
  `doc examples: ${count} ts block(s) in ${pageCount} page(s), ${problems.length} problem(s)`,
);
process.exitCode = problems.length ? 1 : 0;
