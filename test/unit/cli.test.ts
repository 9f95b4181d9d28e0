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
  const cases = (vectors.vectors as Record<string, unknown>[])
    .filter((v) => v.taskID && !v.revision)
    .slice(0, 6);
  it('has vectors to check', () => expect(cases.length).toBeGreaterThan(3));
  for (const v of cases) {
    it(`prints ${String(v.taskID).slice(0, 12)}… for ${String(v.url)}`, async () => {
      const args = [String(v.url)];
      if (Array.isArray(v.filter) && v.filter.length) args.push('--filter', v.filter.join(','));
      if (v.tag !== null) args.push('--tag', String(v.tag));
      if (v.application !== null) args.push('--application', String(v.application));
      if (v.pieceLength !== null) args.push('--piece-length', String(v.pieceLength));
      const r = await run('taskid', ...args);
      expect(r.stdout).toBe(`${String(v.taskID)}\n`);
    });
  }
  it('--canonical prints the canonical URL', async () => {
    const r = await run('taskid', 'https://example.com/file.txt?z=9&b=2&a=1', '--filter', 'z', '--canonical');
    expect(r.stdout).toBe('https://example.com/file.txt?a=1&b=2\n');
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
