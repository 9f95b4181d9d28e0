/**
 * Two checks of the shape of src/, on the TypeScript compiler's syntax tree (the compiler is a dev dependency
 * already; madge or ts-prune would each add a dependency tree for a few dozen lines):
 *
 * - functions and methods longer than a bound (a long function is a state machine nobody can read);
 * - the relative import graph: cycles, and imports from one set of modules into another (the runtime imports
 *   nothing of the product);
 * - comments (and strings) that point at documents outside the repository or at benchmark history instead of
 *   saying why in the code's own terms.
 *
 * test/unit/source-shape.test.ts asserts both; from a shell:
 *
 *   node scripts/source-shape.ts            lists functions over 80 lines, import cycles and such comments;
 *                                           exit 1 if any
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const REPO_ROOT = resolve(import.meta.dirname, '..');

/** Every .ts file under `dir` (relative to the repository root), sorted. */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(join(REPO_ROOT, d), { withFileTypes: true })) {
      const p = `${d}/${e.name}`;
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) out.push(p);
    }
  };
  walk(dir);
  return out.sort();
}

const parsed = new Map<string, ts.SourceFile>();
/** The syntax tree of `file`, parsed once per process (both checks walk every file). */
function parse(file: string): ts.SourceFile {
  let sf = parsed.get(file);
  if (!sf) {
    sf = ts.createSourceFile(file, readFileSync(join(REPO_ROOT, file), 'utf8'), ts.ScriptTarget.Latest, true);
    parsed.set(file, sf);
  }
  return sf;
}

export interface LongFunction {
  file: string;
  line: number;
  name: string;
  lines: number;
}

function nameOf(node: ts.Node): string {
  const named = node as { name?: ts.Node };
  if (named.name && ts.isIdentifier(named.name)) return named.name.text;
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  // An arrow function or function expression takes the name of what it is assigned to.
  const parent = node.parent;
  if (
    parent &&
    (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent))
  )
    return ts.isIdentifier(parent.name) ? parent.name.text : '(anonymous)';
  return '(anonymous)';
}

/** Functions, methods, accessors and arrow functions in `files` whose body spans more than `max` lines. */
export function longFunctions(files: readonly string[], max: number): LongFunction[] {
  const out: LongFunction[] = [];
  for (const file of files) {
    const sf = parse(file);
    const visit = (node: ts.Node) => {
      if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
        const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
        const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
        if (end - start + 1 > max)
          out.push({ file, line: start + 1, name: nameOf(node), lines: end - start + 1 });
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return out;
}

export interface Import {
  from: string;
  to: string;
  /** `import type` / `export type`: erased at run time, but still a dependency of the design. */
  typeOnly: boolean;
}

/** The relative imports, re-exports and dynamic imports of `files`, resolved to repository paths. */
export function imports(files: readonly string[]): Import[] {
  const out: Import[] = [];
  for (const file of files) {
    const sf = parse(file);
    const add = (spec: ts.Expression | undefined, typeOnly: boolean) => {
      if (!spec || !ts.isStringLiteral(spec) || !spec.text.startsWith('.')) return;
      out.push({
        from: file,
        to: relative(REPO_ROOT, resolve(REPO_ROOT, dirname(file), spec.text)),
        typeOnly,
      });
    };
    const visit = (node: ts.Node) => {
      if (ts.isImportDeclaration(node)) {
        const clause = node.importClause;
        const allTypes =
          !!clause &&
          (clause.isTypeOnly ||
            (!clause.name &&
              !!clause.namedBindings &&
              ts.isNamedImports(clause.namedBindings) &&
              clause.namedBindings.elements.length > 0 &&
              clause.namedBindings.elements.every((e) => e.isTypeOnly)));
        add(node.moduleSpecifier, allTypes);
      } else if (ts.isExportDeclaration(node)) {
        add(node.moduleSpecifier, node.isTypeOnly);
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        add(node.arguments[0], false);
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return out;
}

/**
 * The imports between top-level folders of src/ (`src/oci`, `src/place`...; a file at src/'s root stands for itself):
 * a folder is a layer, and layers import one way only. Edges inside a folder are left out.
 */
export function folderImports(edges: readonly Import[]): Import[] {
  const folder = (f: string) => {
    const parts = f.split('/');
    return parts.length > 2 ? parts.slice(0, 2).join('/') : f;
  };
  const seen = new Map<string, Import>();
  for (const e of edges) {
    const from = folder(e.from);
    const to = folder(e.to);
    if (from !== to && !seen.has(`${from} ${to}`))
      seen.set(`${from} ${to}`, { from, to, typeOnly: e.typeOnly });
  }
  return [...seen.values()];
}

/** The cycles of the graph `edges` (each once, as the path from its smallest module back to it). */
export function cycles(edges: readonly Import[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  // Tarjan's strongly connected components; a component of two or more modules holds at least one cycle.
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const strong = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!idx.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1 || (next.get(v) ?? []).includes(v)) components.push(c);
    }
  };
  for (const v of [...next.keys()].sort()) if (!idx.has(v)) strong(v);
  return components.map((c) => shortestCycle(c.sort()[0]!, new Set(c), next));
}

/** A shortest path from `start` back to itself inside one component: the cycle to show. */
function shortestCycle(start: string, inside: Set<string>, next: Map<string, string[]>): string[] {
  const prev = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of next.get(v) ?? []) {
      if (!inside.has(w)) continue;
      if (w === start) {
        const path = [v];
        while (path[0] !== start) path.unshift(prev.get(path[0]!)!);
        return [...path, start];
      }
      if (!prev.has(w)) {
        prev.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start];
}

/**
 * Pointers at what a reader of the repository does not have: the specification's files and section numbers, and
 * benchmark history (what an old run of a benchmark's table showed).
 */
export const OUTSIDE_REFERENCE = /shared\/contracts|design\.md|\bseed \d|\(seed[;]|\bbench\srows?\b/i;

/** Lines of `files` that match `pattern`, as `file:line: text`. */
export function linesMatching(files: readonly string[], pattern: RegExp): string[] {
  return files.flatMap((file) =>
    readFileSync(join(REPO_ROOT, file), 'utf8')
      .split('\n')
      .flatMap((l, i) => (pattern.test(l) ? [`${file}:${i + 1}: ${l.trim()}`] : [])),
  );
}

/** The most lines a function in src/ may span. */
export const MAX_FUNCTION_LINES = 80;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const src = sourceFiles('src');
  const long = longFunctions(src, MAX_FUNCTION_LINES);
  for (const f of long) console.log(`${f.file}:${f.line} ${f.name}: ${f.lines} lines`);
  const found = cycles(imports(src));
  for (const c of found) console.log(`cycle: ${c.join(' -> ')}`);
  const all = [...src, ...sourceFiles('test'), ...sourceFiles('scripts'), ...sourceFiles('bench')];
  const outside = linesMatching(all, OUTSIDE_REFERENCE);
  for (const l of outside) console.log(`points outside the repository: ${l}`);
  process.exitCode = long.length + found.length + outside.length > 0 ? 1 : 0;
}
