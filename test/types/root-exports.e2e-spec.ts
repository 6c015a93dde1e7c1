/**
 * The root entry's names are a promise kept through releases: this fails when `@cyclium/nestjs`
 * gains or loses an export (value or type) without the API table of `docs/reference/api.md`
 * changing with it.
 */
import { describe, expect, it } from '@jest/globals';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import * as root from '@cyclium/nestjs';

const LIBRARY = fileURLToPath(new URL('../../libs/cyclium/', import.meta.url));
const API_PAGE = fileURLToPath(new URL('../../docs/reference/api.md', import.meta.url));
const ROOT_HEADING = '\n## `@cyclium/nestjs`\n';
/**
 * Grows only by a value hosts must name: 43 with ChildEpisodesFailedError and
 * EpisodeResultTimeoutError (issue 43); 45 with PatchDeprecatedError (a method's catch must let it
 * through) and InvalidVersionMoveError (what Episodes.moveVersion throws at its caller) (issue 45);
 * 46 with ActorPauses (pausing an actor cluster-wide from code, issue 47).
 */
const MAX_ROOT_VALUES = 46;

/** The names `index.ts` re-exports, split into values and type-only names (it holds nothing else). */
function entryExports(file: string): { values: string[]; types: string[] } {
  const source = ts.createSourceFile(
    file,
    readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  const values: string[] = [];
  const types: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement))
      throw new Error(
        `index.ts: only \`export { … } from\` lists are expected, found: ${statement.getText()}`,
      );
    const clause = statement.exportClause;
    if (!clause || !ts.isNamedExports(clause))
      throw new Error(`index.ts: no \`export *\`, name each export: ${statement.getText()}`);
    for (const spec of clause.elements)
      (statement.isTypeOnly || spec.isTypeOnly ? types : values).push(spec.name.text);
  }
  return { values: values.sort(), types: types.sort() };
}

/** The rows of the root entry's API table: `| \`Name\` | kind | what it is |`. */
function apiTable(): { values: string[]; types: string[]; blank: string[] } {
  const page = readFileSync(API_PAGE, 'utf8');
  const start = page.indexOf(ROOT_HEADING);
  if (start < 0) throw new Error(`docs/reference/api.md has no ${ROOT_HEADING.trim()} section`);
  const end = page.indexOf('\n## ', start + 1);
  const section = page.slice(start, end < 0 ? undefined : end);
  const rows = [...section.matchAll(/^\| `([A-Za-z_$][\w$]*)` \| ([a-z]+) \| (.*) \|$/gm)];
  const values: string[] = [];
  const types: string[] = [];
  const blank: string[] = [];
  for (const [, name, kind, what] of rows) {
    (kind === 'type' ? types : values).push(name as string);
    if (!what?.trim()) blank.push(name as string);
  }
  return { values: values.sort(), types: types.sort(), blank };
}

describe('the root entry and the API table of docs/reference/api.md', () => {
  const entry = entryExports(join(LIBRARY, 'src/index.ts'));
  const table = apiTable();

  it('list the same values, and the module exports exactly those at run time', () => {
    expect(Object.keys(root).sort()).toEqual(entry.values);
    expect(table.values).toEqual(entry.values);
    expect(entry.values.length).toBeLessThanOrEqual(MAX_ROOT_VALUES);
  });

  it('list the same types, each once, each with a line saying what it is', () => {
    expect(table.types).toEqual(entry.types);
    expect(new Set([...table.values, ...table.types]).size).toBe(
      table.values.length + table.types.length,
    );
    expect(table.blank).toEqual([]);
  });

  it('has a source barrel for every subpath the package exports', () => {
    const manifest = JSON.parse(readFileSync(join(LIBRARY, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
    };
    const subpaths = Object.keys(manifest.exports).filter(
      (key) => key !== '.' && key !== './package.json',
    );
    expect(subpaths.filter((key) => !existsSync(join(LIBRARY, 'src', key, 'index.ts')))).toEqual(
      [],
    );
  });
});
