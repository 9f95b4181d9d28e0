/**
 * The runtime knows no product: it is a controller runtime that peerload's controllers use, not the other way
 * round. Its sources name no peerload resource, metric or identity (the product passes those in) and import
 * nothing from the product's modules.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
const RUNTIME = join(REPO_ROOT, 'src/runtime');
const PRODUCT_MODULES = [
  'src/api',
  'src/check',
  'src/cli',
  'src/controllers',
  'src/http',
  'src/manager',
  'src/modelserver',
  'src/servers',
  'src/storage',
  // The operator's flags and its identity on the wire: the runtime takes its own options (RuntimeOptions) and a
  // KubeIdentity instead.
  'src/config.ts',
  'src/version.ts',
];

const sources = readdirSync(RUNTIME)
  .filter((f) => f.endsWith('.ts'))
  .map((f) => ({ file: `src/runtime/${f}`, text: readFileSync(join(RUNTIME, f), 'utf8') }));

/** Every module specifier: static imports and re-exports, and dynamic import(). */
function specifiers(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/\b(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)) out.push(m[1]!);
  return out;
}

describe('src/runtime is free of the product', () => {
  it('finds the runtime sources and their imports', () => {
    expect(sources.length).toBeGreaterThanOrEqual(10);
    expect(specifiers("import { a } from './x.ts';\nexport * from '../y.ts';\nawait import('z');")).toEqual([
      './x.ts',
      '../y.ts',
      'z',
    ]);
  });

  it.each(sources.map((s) => [s.file, s.text] as const))('%s imports no product module', (file, text) => {
    const product = specifiers(text)
      .filter((s) => s.startsWith('.'))
      .map((s) => relative(REPO_ROOT, resolve(dirname(join(REPO_ROOT, file)), s)))
      .filter((p) => PRODUCT_MODULES.some((m) => p === m || p.startsWith(m + '/')));
    expect(product).toEqual([]);
  });

  it.each(sources.map((s) => [s.file, s.text] as const))('%s does not name peerload', (file, text) => {
    const lines = text
      .split('\n')
      .flatMap((l, i) => (/peerload/i.test(l) ? [`${file}:${i + 1}: ${l.trim()}`] : []));
    expect(lines).toEqual([]);
  });
});
