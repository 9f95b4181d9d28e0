/**
 * The documents a newcomer reads: the README stays short and its commands are the ones CI runs, every relative
 * link lands on a file (and heading) of the repository, the README's example is a valid ServedModel, every condition
 * reason the controllers give is explained, and the layout table names everything in src/.
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { load } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { ServedModel } from '../../src/api/index.ts';

const ROOT = join(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const DOCS = [
  'README.md',
  'CONTRIBUTING.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** Prose only: fenced blocks and code spans hold brackets that are not links. */
const prose = (text: string) => text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');

/**
 * GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens. Written here because no Markdown
 * library is a dependency, and the rule is this small.
 */
const anchor = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');

const anchorsOf = (text: string) =>
  new Set(
    text
      .replace(/^```[\s\S]*?^```/gm, '')
      .split('\n')
      .filter((l) => /^#{1,6} /.test(l))
      .map((l) => anchor(l.replace(/^#+ /, ''))),
  );

/** The blocks of one kind of fence (```sh, ```yaml) of a Markdown text. */
const fenced = (text: string, lang: string) =>
  [...text.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```', 'gm'))].map((m) => m[1]!);

describe('docs', () => {
  it('the README stays a ten-minute read (at most 250 lines)', () => {
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(250);
  });

  it("the README's quick start is the demo, and its commands include `npm test`, the command CI runs", () => {
    const commandsIn = (text: string) =>
      fenced(text, 'sh')
        .join('\n')
        .split('\n')
        .map((l) => l.replace(/#.*/, '').trim());
    const readme = read('README.md');
    const quickStart = readme.split('## Quick start')[1]!.split('\n## ')[0]!;
    expect(commandsIn(quickStart)).toContain('npm run demo');
    expect(commandsIn(readme)).toContain('npm test');
    expect(read('.ci/run').split('\n')).toContain('npm test');
    expect(JSON.parse(read('package.json')).scripts.test).toBe('bash scripts/test.sh');
  });

  it('the README shows the demo before the install, and both before the development set-up', () => {
    const headings = read('README.md')
      .split('\n')
      .filter((l) => l.startsWith('## '));
    const at = (prefix: string) => headings.findIndex((h) => h.startsWith(prefix));
    expect(at('## Quick start')).toBe(0);
    expect(at('## Install')).toBeGreaterThan(at('## Quick start'));
    expect(at('## Develop')).toBeGreaterThan(at('## Install'));
  });

  it('every relative link lands on a file of the repository, and on a heading of it', () => {
    const broken: string[] = [];
    for (const doc of DOCS) {
      for (const [, target] of prose(read(doc)).matchAll(/\]\(([^)\s]+)\)/g)) {
        // Absolute URLs; and a regular expression in a table cell (`]([-a-z0-9]*...`), not a link.
        if (/^[a-z]+:/.test(target!) || target!.includes('[')) continue;
        const [path, hash] = target!.split('#') as [string, string | undefined];
        const file = path === '' ? join(ROOT, doc) : resolve(dirname(join(ROOT, doc)), path);
        if (relative(ROOT, file).startsWith('..') || !existsSync(file)) {
          broken.push(`${doc}: ${target} (no such file in the repository)`);
          continue;
        }
        if (hash && file.endsWith('.md') && !anchorsOf(readFileSync(file, 'utf8')).has(hash))
          broken.push(`${doc}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });

  it("the README's example is a valid ServedModel", () => {
    const example = fenced(read('README.md'), 'yaml');
    expect(example).toHaveLength(1);
    expect(example[0]!.trim().split('\n').length).toBeLessThanOrEqual(5);
    const sm = ServedModel.parse(load(example[0]!));
    expect(sm.spec.preheat?.create).toBe(true);
  });

  it('every condition reason of the controllers is explained in docs/operations.md', () => {
    const reasons = new Set<string>();
    const sources = (dir: string): string[] =>
      readdirSync(dir).flatMap((f) => {
        const p = join(dir, f);
        return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
      });
    for (const file of sources(join(ROOT, 'src/controllers'))) {
      const text = readFileSync(file, 'utf8');
      // `export const XReason = { Name: 'Name', ... } as const` and `export type XReason = | 'A' | 'B';`
      for (const [, body] of text.matchAll(/export const \w*Reason = \{([\s\S]*?)\} as const/g))
        for (const [, name] of body!.matchAll(/^\s+(\w+): '\w+',$/gm)) reasons.add(name!);
      for (const [, body] of text.matchAll(/export type \w*Reason =([^;]*);/g))
        for (const [, name] of body!.matchAll(/'(\w+)'/g)) reasons.add(name!);
    }
    // The extraction found the reasons it must (an empty set would pass the check below).
    for (const known of ['JobFailed', 'SecretNotFound', 'PreheatConflict', 'VersionMismatch', 'Deleting'])
      expect(reasons).toContain(known);
    const troubleshooting = read('docs/operations.md').split('## Troubleshooting by condition reason')[1]!;
    const rows = new Set([...troubleshooting.matchAll(/^\| `(\w+)` \|/gm)].map((m) => m[1]));
    expect([...reasons].filter((r) => !rows.has(r))).toEqual([]);
  });

  it('the layout table of docs/development.md names everything in src/', () => {
    const layout = read('docs/development.md').split('## Layout')[1]!.split('\n## ')[0]!;
    const named = new Set([...layout.matchAll(/`(src\/[^`]+)`/g)].map((m) => m[1]!.replace(/\/$/, '')));
    const missing = readdirSync(join(ROOT, 'src'))
      .map((f) => `src/${f}`)
      .filter((p) => !named.has(p));
    expect(missing).toEqual([]);
  });
});
