/**
 * Folder imports run one way (docs/contributing/inside-the-library.md): this fails when an import
 * of a library file, type imports included, closes a loop between folders of `src/`, and names the
 * files that close it.
 */
import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const SRC = fileURLToPath(new URL('../../libs/cyclium/src/', import.meta.url));

function libraryFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return libraryFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

/** A file's folder under src/; a file at the root is a room of its own. */
function roomOf(file: string): string {
  const parts = relative(SRC, file).split(sep);
  return parts.length > 1 ? parts[0] : parts[0].replace(/\.ts$/, '');
}

/** Every relative module a file names: imports, `import type`, re-exports and `import()` types. */
function relativeSpecifiers(file: string): string[] {
  const source = ts.createSourceFile(
    file,
    readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.push(node.moduleSpecifier.text);
    } else if (
      ts.isImportTypeNode(node) &&
      ts.isLiteralTypeNode(node.argument) &&
      ts.isStringLiteral(node.argument.literal)
    ) {
      found.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found.filter((specifier) => specifier.startsWith('.'));
}

/** Folder → folder edges, each with the imports that draw it. */
function folderEdges(): Map<string, Map<string, string[]>> {
  const edges = new Map<string, Map<string, string[]>>();
  for (const file of libraryFiles(SRC)) {
    const from = roomOf(file);
    for (const specifier of relativeSpecifiers(file)) {
      const to = roomOf(resolve(dirname(file), specifier));
      if (to === from) continue;
      const targets = edges.get(from) ?? new Map<string, string[]>();
      edges.set(from, targets);
      targets.set(to, [...(targets.get(to) ?? []), `${relative(SRC, file)} -> ${specifier}`]);
    }
  }
  return edges;
}

/** The strongly connected groups of more than one folder (Tarjan). */
function cycles(edges: Map<string, Map<string, string[]>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const groups: string[][] = [];
  const connect = (room: string): void => {
    index.set(room, next);
    low.set(room, next++);
    stack.push(room);
    for (const target of edges.get(room)?.keys() ?? []) {
      if (!index.has(target)) {
        connect(target);
        low.set(room, Math.min(low.get(room)!, low.get(target)!));
      } else if (stack.includes(target)) {
        low.set(room, Math.min(low.get(room)!, index.get(target)!));
      }
    }
    if (low.get(room) !== index.get(room)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      group.push(member);
    } while (member !== room);
    if (group.length > 1) groups.push(group.sort());
  };
  for (const room of edges.keys()) if (!index.has(room)) connect(room);
  return groups;
}

describe('library folders', () => {
  it('import one way: no loop between folders, type imports included', () => {
    const edges = folderEdges();
    expect(edges.size).toBeGreaterThan(10);
    const loops = cycles(edges).map((group) =>
      [
        `loop between ${group.join(', ')}:`,
        ...group.flatMap((from) =>
          [...(edges.get(from) ?? new Map<string, string[]>())]
            .filter(([to]) => group.includes(to))
            .flatMap(([, imports]) => imports.map((line) => `  ${line}`)),
        ),
      ].join('\n'),
    );
    expect(loops).toEqual([]);
  });
});
