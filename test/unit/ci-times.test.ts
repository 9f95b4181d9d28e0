/**
 * Where CI's time goes, as it prints it: the set-up's step times (scripts/lib.sh's timed_step and print_step_times,
 * run here with commands that stand in for the set-up scripts) and the slowest test files after vitest's run
 * (test/support/slowest-files.ts).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import suite from '../../vitest.config.ts';
import { SlowestFiles, slowestFilesReport, type FileTime } from '../support/slowest-files.ts';

const run = promisify(execFile);
const LIB = resolve(import.meta.dirname, '../../scripts/lib.sh');

describe('the set-up step times (scripts/lib.sh)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'peerload-ci-times-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  /** Sources lib.sh in bash, runs `script`; its stdout and stderr. */
  const bash = async (script: string) => {
    const r = await run('bash', ['-c', `source "${LIB}"\n${script}`], {
      env: { ...process.env, PEERLOAD_CACHE: join(dir, 'cache') },
    });
    return { out: r.stdout, err: r.stderr };
  };

  it('a step that logs was set up, a silent one found its cache, a failed one keeps its status; slowest first', async () => {
    const { out, err } = await bash(`
      f="${dir}/times"
      timed_step "$f" "the control plane" sleep 0.3
      built() { log "building the registry"; sleep 0.1; }
      timed_step "$f" "the OCI registry" built
      timed_step "$f" "modctl" bash -c 'source "${LIB}"; log building; exit 3' || echo "status $?"
      timed_step "$f" "helm" true
      timed_step "$f" "promtool" bash -c 'i=0; while (( i < 400000 )); do (( i++ )); done'
      ls "${dir}"
      print_step_times "$f"`);
    // The markers a step leaves (logged, CPU time) are gone afterwards; only the times file remains.
    expect(out).toBe('status 3\ncache\ntimes\n');
    const all = err.split('\n').filter((l) => l.startsWith('setup: '));
    const total =
      /^setup: (\d+\.\d) CPU-s in all steps \((\d+\.\d) min of both cores of a 2-core machine\)$/.exec(
        all.pop()!,
      );
    const lines = all.map((l) =>
      /^setup: (.+) (\d+\.\d) s, (\d+\.\d) CPU-s \((cached|set up|failed)\)$/.exec(l)!,
    );
    expect(lines.every((m) => m !== null)).toBe(true);
    const steps = Object.fromEntries(
      lines.map(([, name, s, cpu, state]) => [name, { seconds: Number(s), cpu: Number(cpu), state }]),
    );
    expect(Object.keys(steps).sort()).toEqual(
      ['helm', 'modctl', 'the OCI registry', 'the control plane', 'promtool'].sort(),
    );
    // CPU time is the step's own processes': a busy loop in a child process counts, a sleep does not.
    expect(steps['promtool']!.cpu).toBeGreaterThan(0.2);
    expect(steps['the control plane']!.cpu).toBeLessThan(0.1);
    const sum = lines.reduce((s, m) => s + Number(m[3]), 0);
    expect(total).not.toBeNull();
    expect(Number(total![1])).toBeCloseTo(sum, 0);
    expect(Number(total![2])).toBeCloseTo(Number(total![1]) / 120, 1);
    expect(steps['the control plane']).toMatchObject({ state: 'cached' });
    expect(steps['the OCI registry']).toMatchObject({ state: 'set up' });
    expect(steps['modctl']).toMatchObject({ state: 'failed' });
    expect(steps['helm']).toMatchObject({ state: 'cached' });
    expect(steps['the control plane']!.seconds).toBeGreaterThanOrEqual(0.3);
    expect(steps['the OCI registry']!.seconds).toBeGreaterThanOrEqual(0.1);
    const seconds = lines.map((m) => Number(m[2]));
    expect(seconds).toEqual([...seconds].sort((a, b) => b - a));
    expect(err).toContain('[setup] building the registry\n');
  });

  it('orders by seconds as numbers, with minutes-long steps', async () => {
    const { err } = await bash(`
      f="${dir}/long"
      printf '9.5\\tTriton\\tset up\\t6.0\\n1074.2\\tthe real Dragonfly network\\tset up\\t2000.0\\n130.0\\tMinIO\\tcached\\t\\n' >"$f"
      print_step_times "$f"
      print_step_times "${dir}/none"`);
    expect(err).toBe(
      [
        'setup: the real Dragonfly network 1074.2 s, 2000.0 CPU-s (set up)',
        'setup: MinIO 130.0 s (cached)',
        'setup: Triton 9.5 s, 6.0 CPU-s (set up)',
        'setup: 2006.0 CPU-s in all steps (16.7 min of both cores of a 2-core machine)',
        '',
      ].join('\n'),
    );
  });
});

describe('the slowest test files (test/support/slowest-files.ts)', () => {
  const file = (f: string, seconds: number, project = 'e2e', tests = 2, failed = false): FileTime => ({
    file: f,
    project,
    ms: seconds * 1000,
    tests,
    failed,
  });

  it('lists the slowest first with their share of the run, aligned, at most the count asked', () => {
    const files = [
      file('test/unit/a.test.ts', 0.25, 'unit', 40),
      file('test/e2e/real-p2p.test.ts', 236.14),
      file('test/integration/b.test.ts', 12.5, 'integration', 1, true),
      file('test/e2e/kserve-fetch-real-p2p.test.ts', 46.3, 'e2e', 3),
    ];
    expect(slowestFilesReport(files, 3)).toEqual([
      'Slowest 3 of 4 test files: 294.9 s of 295.2 s',
      '  236.1 s  e2e          test/e2e/real-p2p.test.ts (2 tests)',
      '   46.3 s  e2e          test/e2e/kserve-fetch-real-p2p.test.ts (3 tests)',
      '   12.5 s  integration  test/integration/b.test.ts (1 test, failed)',
    ]);
    expect(slowestFilesReport(files, 15)).toHaveLength(5);
  });

  it('says nothing for a single file, and breaks ties by path', () => {
    expect(slowestFilesReport([file('test/unit/a.test.ts', 1)], 15)).toEqual([]);
    expect(slowestFilesReport([file('b', 1, 'unit'), file('a', 1, 'unit')], 15).slice(1)).toEqual([
      '  1.0 s  unit  a (2 tests)',
      '  1.0 s  unit  b (2 tests)',
    ]);
  });

  it('is a reporter of the vitest configuration CI runs, beside the default one', () => {
    const reporters = suite.test!.reporters as unknown[];
    expect(reporters[0]).toBe('default');
    expect(reporters.filter((r) => r instanceof SlowestFiles)).toHaveLength(1);
  });
});
