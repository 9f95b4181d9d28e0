import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import vectors from '../vectors/taskid.json' with { type: 'json' };

const BIN = join(import.meta.dirname, '../../bin/peerload.js');
const run = async (...args: string[]) =>
  promisify(execFile)(process.execPath, [BIN, ...args]).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({
      code: e.code,
      stdout: e.stdout,
      stderr: e.stderr,
    }),
  );

describe('peerload taskid', () => {
  type Rule = '1.4' | '1.5.3+';
  interface V {
    url: string;
    filter: string[];
    tag: string | null;
    application: string | null;
    revision: string | null;
    pieceLength: number | null;
    expected: Record<Rule, { canonicalURL: string; taskID: string }>;
  }
  const all = (vectors.vectors as V[]).filter((v) => !v.revision && !/[ \u0080-\uffff]/.test(v.url));
  // Cases where the two rules give different ids, with tags, applications and piece lengths among them.
  const cases = all.filter((v) => v.expected['1.4'].taskID !== v.expected['1.5.3+'].taskID).slice(-6);
  const argsOf = (v: V) => {
    const args = [v.url];
    if (v.filter.length) args.push('--filter', v.filter.join(','));
    if (v.tag !== null) args.push('--tag', v.tag);
    if (v.application !== null) args.push('--application', v.application);
    if (v.pieceLength !== null) args.push('--piece-length', String(v.pieceLength));
    return args;
  };
  it('has vectors to check', () => expect(cases.length).toBeGreaterThan(3));
  for (const v of cases) {
    it(`prints both rules' ids for ${v.url} (default: 1.4, the tested release)`, async () => {
      const args = argsOf(v);
      expect((await run('taskid', ...args)).stdout).toBe(`${v.expected['1.4'].taskID}\n`);
      expect((await run('taskid', ...args, '--daemon-version', '1.4.2')).stdout).toBe(
        `${v.expected['1.4'].taskID}\n`,
      );
      expect((await run('taskid', ...args, '--daemon-version', '1.5.3+')).stdout).toBe(
        `${v.expected['1.5.3+'].taskID}\n`,
      );
      expect((await run('taskid', ...args, '--daemon-version', 'v1.6.0')).stdout).toBe(
        `${v.expected['1.5.3+'].taskID}\n`,
      );
    });
  }
  it('--canonical prints the canonical URL', async () => {
    const url = 'https://example.com/file.txt?z=9&b=2&a=1';
    const r = await run('taskid', url, '--filter', 'z', '--canonical');
    expect(r.stdout).toBe('https://example.com/file.txt?b=2&a=1\n');
    const sorted = await run('taskid', url, '--filter', 'z', '--canonical', '--daemon-version', '1.5.3');
    expect(sorted.stdout).toBe('https://example.com/file.txt?a=1&b=2\n');
  });
  it('explains a bad daemon version', async () => {
    const r = await run('taskid', 'https://example.com/x', '--daemon-version', 'latest');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--daemon-version must be "1.4", "1.5.3+" or the peer daemon');
    expect(r.stderr).toContain('got "latest"');
  });
  it('explains a bad piece length', async () => {
    const r = await run('taskid', 'https://example.com/x', '--piece-length', 'four');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--piece-length must be a positive integer');
  });
});

describe('peerload', () => {
  it('names the flag of a bad operator option instead of crashing', async () => {
    const r = await run('operator', '--resync-period', 'often');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--resync-period.*duration/);
    expect(r.stderr).not.toMatch(/at .*\.ts:\d+/); // no stack trace
  });
  it('rejects an unknown command with the usage', async () => {
    const r = await run('preheat-everything');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('Commands:');
  });
  it('prints the CRDs', async () => {
    const r = await run('crds');
    expect(r.stdout).toContain('name: modelpreheats.peerload.io');
    expect(r.stdout).toContain('name: servedmodels.peerload.io');
  });
});
