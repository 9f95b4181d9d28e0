/** The CLI as pipelines use it: --version, usage on bad options, the engine check, wait's readiness rules. */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runPeerload } from '../support/process.ts';
import { readiness } from '../../src/cli/wait.ts';
import { VERSION } from '../../src/version.ts';

const OLD_NODE = join(import.meta.dirname, '../support/old-node.mjs');
const run = (args: string[], nodeArgs: string[] = [], env: NodeJS.ProcessEnv = process.env) =>
  runPeerload(args, { nodeArgs, env });

describe('peerload CLI for pipelines', () => {
  it('--version prints the package version, for the program and every command', async () => {
    const argss = [['--version'], ['-V'], ['wait', '--version'], ['operator', '--version']];
    const results = await Promise.all(argss.map((args) => run(args)));
    results.forEach((r, i) =>
      expect(r, argss[i]!.join(' ')).toMatchObject({ code: 0, stdout: `peerload ${VERSION}\n` }),
    );
  });

  it('answers an unknown option with one line and the command usage, exit 2', async () => {
    const commands = ['wait', 'preheat', 'check', 'taskid', 'crds', 'operator'];
    const results = new Map(
      await Promise.all(commands.map(async (c) => [c, await run([c, '--frobnicate'])] as const)),
    );
    for (const [command, usage] of [
      ['wait', 'Usage: peerload wait'],
      ['preheat', 'Usage: peerload preheat'],
      ['check', 'Usage: peerload check'],
      ['taskid', 'Usage: peerload taskid'],
      ['crds', 'Usage: peerload crds'],
      ['operator', 'Usage: peerload operator'],
    ] as const) {
      const r = results.get(command)!;
      expect(r.code, command).toBe(2);
      expect(r.stderr.split('\n')[0]).toBe(`peerload ${command}: unknown option --frobnicate`);
      expect(r.stderr).toContain(usage);
      expect(r.stderr).not.toMatch(/To specify a positional argument|at .*\.ts:\d+/);
    }
  });

  it('shows defaults in the help', async () => {
    const [wait, preheat, operator] = await Promise.all([
      run(['wait', '--help']),
      run(['preheat', '--help']),
      run(['operator', '--help']),
    ]);
    expect(wait.stdout).toMatch(/--timeout .*\(default 10m\)/);
    expect(preheat.stdout).toMatch(/--scope .*\(default single_seed_peer\)/);
    expect(operator.stdout).toMatch(/--lease-duration .*\(default 15s\)/);
    expect(operator.stdout).toMatch(/--workers .*\(default 4\)/);
  });

  it('on an old Node.js says so in one line instead of an undici stack trace', async () => {
    const r = await run(['operator', '--help'], ['--import', OLD_NODE]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(
        /^peerload: needs Node\.js >= 22\.19, this is v20\.11\.1 \(.*\); install a newer Node\.js$/,
      ),
    ]);
    // 22.19 itself is accepted (what undici needs; package.json engines says the same).
    const ok = await run(['--version'], ['--import', OLD_NODE], {
      ...process.env,
      PEERLOAD_FAKE_NODE_VERSION: '22.19.0',
    });
    expect(ok.code).toBe(0);
  });

  it('preheat --dry-run prints the ModelPreheat; bad input names the flag', async () => {
    const r = await run([
      'preheat',
      '--object-storage',
      's3',
      '--bucket',
      'models',
      '--credentials-secret',
      's3-credentials',
      '--key',
      'a.mar',
      '--key',
      'b.mar',
      '--dry-run',
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('kind: ModelPreheat');
    expect(r.stdout).toMatch(/keys:\n\s+- a\.mar\n\s+- b\.mar/);
    expect(await run(['preheat', '--url', 'ftp://x/y', '--dry-run'])).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/^peerload preheat: --url: must be an absolute http/),
    });
    // objectStorage without credentials is refused by the same rule as the apiserver's.
    expect(
      await run(['preheat', '--object-storage', 's3', '--bucket', 'models', '--key', 'a.mar', '--dry-run']),
    ).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--credentials-secret: credentialsSecretRef is required'),
    });
    expect(await run(['preheat', '--dry-run'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('give either --url or --object-storage'),
    });
    expect(await run(['preheat', '--url', 'http://x/y', '--scope', 'everyone', '--dry-run'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--scope: must be one of single_seed_peer, all_seed_peers, all_peers'),
    });
  });

  it('wait rejects what it cannot wait for, exit 2', async () => {
    expect(await run(['wait', 'deployment/x'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('(mph|sm)/NAME'),
    });
    expect(await run(['wait', 'sm/x', '--timeout', 'forever'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--timeout: must be a positive duration'),
    });
  });
});

describe('readiness (what peerload wait reads)', () => {
  const obj = (generation: number, status?: object) =>
    ({ metadata: { name: 'x', generation }, ...(status ? { status } : {}) }) as never;
  const c = (type: string, status: string, reason: string, message = '') => ({
    type,
    status,
    reason,
    message,
  });

  it('no status, or status of an older generation: in progress', () => {
    expect(readiness(obj(1))).toEqual({
      state: 'InProgress',
      line: 'waiting for the operator to report status',
    });
    expect(
      readiness(obj(2, { observedGeneration: 1, conditions: [c('Ready', 'True', 'JobSucceeded')] })),
    ).toEqual({
      state: 'InProgress',
      line: 'waiting for the operator to observe generation 2',
    });
  });

  /** What `peerload wait` reads of an object whose status is of its current generation. */
  const observed = (status: object) => readiness(obj(1, { observedGeneration: 1, ...status }));

  it('Ready, Stalled (wins over Ready), Reconciling', () => {
    expect(observed({ phase: 'SUCCESS', conditions: [c('Ready', 'True', 'JobSucceeded', 'done')] })).toEqual({
      state: 'Ready',
      line: 'Ready: JobSucceeded: done [SUCCESS]',
    });
    const notFound = 'Service ts not found';
    expect(
      observed({
        ready: '0/0',
        conditions: [
          c('Ready', 'False', 'ServiceNotFound', 'm'),
          c('Stalled', 'True', 'ServiceNotFound', notFound),
        ],
      }),
    ).toEqual({ state: 'Stalled', line: `Stalled: ServiceNotFound: ${notFound} [0/0]` });
    const retrying = [
      c('Ready', 'Unknown', 'JobFailedWillRetry', 'r'),
      c('Reconciling', 'True', 'JobFailedWillRetry', 'retrying in 30s'),
    ];
    expect(observed({ phase: 'RETRYING', conditions: retrying })).toEqual({
      state: 'InProgress',
      line: 'Reconciling: JobFailedWillRetry: retrying in 30s [RETRYING]',
    });
  });
});
