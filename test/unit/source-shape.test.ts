/**
 * The shape of src/ (scripts/source-shape.ts): no function over MAX_FUNCTION_LINES lines, no import cycle, and a
 * runtime that imports nothing of the product.
 */
import { writeFileSync, mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  MAX_FUNCTION_LINES,
  OUTSIDE_REFERENCE,
  REPO_ROOT,
  cycles,
  folderImports,
  imports,
  linesMatching,
  longFunctions,
  sourceFiles,
} from '../../scripts/source-shape.ts';

const src = sourceFiles('src');

/** Files whose comments still point outside the repository: rewritten on the ServedModel / model-server branch. */
const NOT_YET_REWORDED: string[] = [];

/** Writes `files` (path -> text) into a scratch directory under the repository; returns its relative path. */
function scratch(files: Record<string, string>): { dir: string; done: () => void } {
  const abs = mkdtempSync(join(REPO_ROOT, 'test/.shape-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(abs, name, '..'), { recursive: true });
    writeFileSync(join(abs, name), text);
  }
  return { dir: relative(REPO_ROOT, abs), done: () => rmSync(abs, { recursive: true, force: true }) };
}

describe('the checks themselves', () => {
  it('measure functions, methods and arrow functions, nested ones included', () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  const v${i} = ${i};`).join('\n');
    const s = scratch({
      'a.ts': `export function short() {\n${body(3)}\n}\nexport function long() {\n${body(101)}\n}\n`,
      'b.ts': `class C {\n  m() {\n${body(120)}\n  }\n}\nconst f = () => {\n${body(98)}\n};\nexport { C, f };\n`,
    });
    try {
      const found = longFunctions(sourceFiles(s.dir), 100).map((f) => `${f.name}:${f.lines}`);
      expect(found).toEqual(['long:103', 'm:122']);
    } finally {
      s.done();
    }
  });

  it('find a cycle between folders that no two files make alone', () => {
    const s = scratch({
      'a/x.ts': "import { y } from '../b/y.ts';\nexport const x = y;\n",
      'b/y.ts': 'export const y = 1;\n',
      'b/z.ts': "import { w } from '../a/w.ts';\nexport const z = w;\n",
      'a/w.ts': 'export const w = 2;\n',
    });
    try {
      // Files: no cycle (x -> y, z -> w); folders: a -> b -> a.
      expect(cycles(imports(sourceFiles(s.dir)))).toEqual([]);
      const rel = (f: string) => f.slice(s.dir.length + 1);
      const shifted = imports(sourceFiles(s.dir)).map((e) => ({
        ...e,
        from: `src/${rel(e.from)}`,
        to: `src/${rel(e.to)}`,
      }));
      expect(cycles(folderImports(shifted)).map((c) => [...c].sort())).toEqual([['src/a', 'src/a', 'src/b']]);
    } finally {
      s.done();
    }
  });

  it('find a cycle through re-exports, type imports and dynamic imports', () => {
    const s = scratch({
      'a.ts': "export type { B } from './b.ts';\n",
      'b.ts': "import type { C } from './c.ts';\nexport type B = C;\n",
      'c.ts': "export const c = () => import('./a.ts');\nexport type C = number;\n",
      'd.ts': "import { c } from './c.ts';\nexport const d = c;\n",
    });
    try {
      const found = cycles(imports(sourceFiles(s.dir)));
      expect(found.map((c) => c.map((f) => f.slice(s.dir.length + 1)))).toEqual([
        ['a.ts', 'b.ts', 'c.ts', 'a.ts'],
      ]);
    } finally {
      s.done();
    }
  });
});

describe('src/', () => {
  it(`has no function over ${MAX_FUNCTION_LINES} lines`, () => {
    const long = longFunctions(src, MAX_FUNCTION_LINES).map((f) => `${f.file} ${f.name}`);
    expect(long).toEqual([]);
  });

  it('has no import cycle (type-only imports included: they are the design too)', () => {
    expect(src.length).toBeGreaterThan(50);
    expect(cycles(imports(src))).toEqual([]);
  });

  it('has no import cycle between its folders: each folder is a layer, imported one way', () => {
    const folders = folderImports(imports(src));
    expect(folders.length).toBeGreaterThan(30);
    const found = cycles(folders);
    // Each cycle with the file-level imports that make it, so the message says what to move.
    const why = found.map((c) =>
      c.map((f, i) =>
        i === 0
          ? f
          : `${f} (${imports(src)
              .filter((e) => e.from.startsWith(`${c[i - 1]}/`) && e.to.startsWith(`${f}/`))
              .map((e) => `${e.from} -> ${e.to}`)
              .join(', ')})`,
      ),
    );
    expect(why).toEqual([]);
  });

  it('has a runtime that imports only itself and the redaction of secrets', () => {
    const runtime = imports(src).filter((i) => i.from.startsWith('src/runtime/'));
    expect(runtime.length).toBeGreaterThan(20);
    const outside = runtime.filter((i) => !i.to.startsWith('src/runtime/') && i.to !== 'src/redact.ts');
    expect(outside.map((i) => `${i.from} -> ${i.to}`)).toEqual([]);
  });

  it('has an operator configuration that does not depend on the CLI', () => {
    const config = imports(src).filter((i) => i.from === 'src/config.ts');
    expect(config.length).toBeGreaterThan(0);
    expect(config.filter((i) => i.to.startsWith('src/cli/')).map((i) => i.to)).toEqual([]);
  });

  it('has comments in its own terms: no pointer at documents outside the repository or at benchmark history', () => {
    // Pieced together, so that this file does not match itself.
    expect(OUTSIDE_REFERENCE.test('see shared/' + 'contracts/x.md')).toBe(true);
    expect(OUTSIDE_REFERENCE.test('0 workers (seed ' + '2.4)')).toBe(true);
    expect(OUTSIDE_REFERENCE.test('as bench ' + 'row 5 showed')).toBe(true);
    expect(OUTSIDE_REFERENCE.test('peers.push(seed);')).toBe(false);
    expect(OUTSIDE_REFERENCE.test('the seed peer (seed peers)')).toBe(false);
    const files = [...src, ...sourceFiles('test'), ...sourceFiles('scripts'), ...sourceFiles('bench')];
    const found = linesMatching(files, OUTSIDE_REFERENCE);
    expect(found.filter((l) => !NOT_YET_REWORDED.includes(l.slice(0, l.indexOf(':'))))).toEqual([]);
    // An entry that complies leaves the list.
    expect(NOT_YET_REWORDED.filter((f) => !found.some((l) => l.startsWith(`${f}:`)))).toEqual([]);
  });
});
