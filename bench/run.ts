/**
 * `npm run bench` (scripts/bench.sh runs this with Node 24): the benchmark scenarios (bench/README.md), each with a
 * reference measured in the same run. Prints a Markdown table on stdout and writes bench/results/latest.json.
 *
 *   npm run bench -- --only 1,2 --reps 5
 *
 * Options: --only <list of 1..15>, --reps <n ≥ 1; default 3>, --out <json path>, --workers <n> (scenario 1),
 * --size-mib <n> (scenarios 3 and 6; default 1024), --origin-mbps <MB/s> (scenario 4; default 50),
 * --idle-seconds <n> (scenario 5; default 60), --size8-mib <n> (scenario 8, one object per run; default 256),
 * --poll-ms <n> (scenario 9: real ms per simulated minute; default 2000), --size11-mib <n> (scenario 11, the model's
 * size in 8 shards, objects of their own per run; default 2048), --size12-mib <n> (scenario 12, the same for the
 * artifact and the directory; default 2048), --n12 <list> (scenario 12's replica
 * counts; default 1,2,4), --retries12 <back-to-source limit>,<limit> (scenario 12's scheduler retries as an admin
 * sets them; default the stock 4,5), --seed-first12 (scenario 12: a seed-peer job of the same URLs before each
 * node-targeted one), --hub12 (scenario 12: also the shards as a Hugging Face repository's LFS files, rows 12h),
 * --checksums12 (scenario 12: also the S3 directory with each file's sha256 checked, what the
 * artifact's digest check costs), --size13-mib <n> (scenario 13, one object per run;
 * default 256).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane, type ControlPlane } from '../test/support/controlplane.ts';
import { installCRDs } from '../test/support/kube.ts';
import { progress, table, type Row } from './lib/report.ts';
import { scenario1 } from './scenarios/s1-preheats.ts';
import { scenario2 } from './scenarios/s2-fanout.ts';
import { dataPlaneScenarios } from './scenarios/s3-s6-dataplane.ts';
import { scenario4 } from './scenarios/s4-origin.ts';
import { scenario5 } from './scenarios/s5-idle.ts';
import { scenario7 } from './scenarios/s7-head-of-line.ts';
import { scenario8 } from './scenarios/s8-node-preheat.ts';
import { scenario9 } from './scenarios/s9-soak.ts';
import { scenario10 } from './scenarios/s10-fleet.ts';
import { scenario11 } from './scenarios/s11-directory.ts';
import { scenario12 } from './scenarios/s12-oci-artifact.ts';
import { scenario13 } from './scenarios/s13-seed-preheat.ts';
import { scenario14 } from './scenarios/s14-staged-triton.ts';
import { scenario15 } from './scenarios/s15-staged-torchserve.ts';

const ROOT = resolve(import.meta.dirname, '..');

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    reps: { type: 'string' },
    out: { type: 'string' },
    workers: { type: 'string' },
    'size-mib': { type: 'string' },
    'origin-mbps': { type: 'string' },
    'idle-seconds': { type: 'string' },
    'size8-mib': { type: 'string' },
    'poll-ms': { type: 'string' },
    'size11-mib': { type: 'string' },
    'size12-mib': { type: 'string' },
    n12: { type: 'string' },
    retries12: { type: 'string' },
    'seed-first12': { type: 'boolean' },
    checksums12: { type: 'boolean' },
    hub12: { type: 'boolean' },
    'size13-mib': { type: 'string' },
    'size14-mib': { type: 'string' },
  },
  strict: true,
});
const only = new Set(
  (values.only ?? '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15').split(',').map((s) => Number(s.trim())),
);
const reps = Math.max(1, Number(values.reps ?? 3));
const out = resolve(values.out ?? `${ROOT}/bench/results/latest.json`);
const workers = Number(values.workers ?? 32);
const sizeMiB = Number(values['size-mib'] ?? 1024);
const originMBps = Number(values['origin-mbps'] ?? 50);
const idleSeconds = Number(values['idle-seconds'] ?? 60);
const size8MiB = Number(values['size8-mib'] ?? 256);
const pollMs = Number(values['poll-ms'] ?? 2000);
const size11MiB = Number(values['size11-mib'] ?? 2048);
const size12MiB = Number(values['size12-mib'] ?? 2048);
const n12 = (values.n12 ?? '1,2,4').split(',').map((s) => Number(s.trim()));
const [backToSourceLimit, retryLimit] = (values.retries12 ?? '').split(',').map((s) => Number(s.trim()));
const retries12 = backToSourceLimit && retryLimit ? { backToSourceLimit, limit: retryLimit } : undefined;
const size13MiB = Number(values['size13-mib'] ?? 256);
const size14MiB = Number(values['size14-mib'] ?? 128);

function machine(): Record<string, unknown> {
  const sh = (cmd: string, args: string[]) => {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8' }).trim();
    } catch {
      return '';
    }
  };
  return {
    nproc: Number(sh('nproc', [])) || cpus().length,
    cpuModel: cpus()[0]?.model ?? '',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: sh('uname', ['-r']),
    node: process.version,
    java: sh('bash', ['-c', 'java -version 2>&1 | head -1']),
    loadavgAtStart: readFileSync('/proc/loadavg', 'utf8').trim(),
    gitCommit: sh('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']),
    gitDirty: sh('git', ['-C', ROOT, 'status', '--porcelain']).length > 0,
  };
}

async function withControlPlane<T>(fn: (cp: ControlPlane) => Promise<T>): Promise<T> {
  // Each scenario gets its own control plane, so one scenario's objects and traffic never reach another's.
  const cp = await startControlPlane();
  try {
    await installCRDs(cp.kubeconfigPath);
    return await fn(cp);
  } finally {
    await cp.stop();
  }
}

async function main(): Promise<number> {
  const started = Date.now();
  const info = machine();
  progress(`machine: ${JSON.stringify(info)}`);
  const rows: Row[] = [];
  const raw: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  const attempt = async (id: string, fn: () => Promise<{ rows: Row[]; raw: unknown }>) => {
    const t = Date.now();
    progress(`scenario ${id}: start`);
    try {
      const r = await fn();
      rows.push(...r.rows);
      raw[id] = r.raw;
    } catch (err) {
      const cause = (err as Error).cause as Error | undefined;
      errors[id] =
        `${(err as Error).stack ?? String(err)}${cause ? `\ncause: ${cause.stack ?? String(cause)}` : ''}`;
      progress(`scenario ${id} FAILED: ${(err as Error).message}`);
    }
    progress(`scenario ${id}: ${((Date.now() - t) / 1000).toFixed(0)} s`);
  };

  if (only.has(1))
    await attempt('1', () =>
      withControlPlane((cp) => scenario1(cp, { reps, workers, pollBackoffStart: '100ms' })),
    );
  if (only.has(2)) await attempt('2', () => withControlPlane((cp) => scenario2(cp, { reps })));
  if (only.has(3) || only.has(6))
    await attempt(only.has(3) && only.has(6) ? '3+6' : only.has(3) ? '3' : '6', () =>
      dataPlaneScenarios({ reps, sizeBytes: sizeMiB * 2 ** 20, s3: only.has(3), s6: only.has(6) }),
    );
  if (only.has(4)) await attempt('4', () => withControlPlane((cp) => scenario4(cp, { reps, originMBps })));
  if (only.has(5)) await attempt('5', () => withControlPlane((cp) => scenario5(cp, { reps, idleSeconds })));
  if (only.has(7)) await attempt('7', () => withControlPlane((cp) => scenario7(cp, { reps })));
  if (only.has(8))
    await attempt('8', () =>
      withControlPlane((cp) => scenario8(cp, { reps, sizeBytes: size8MiB * 2 ** 20 })),
    );
  if (only.has(9)) await attempt('9', () => withControlPlane((cp) => scenario9(cp, { pollMs })));
  if (only.has(10)) await attempt('10', () => withControlPlane((cp) => scenario10(cp)));
  if (only.has(11))
    await attempt('11', () =>
      withControlPlane((cp) => scenario11(cp, { reps, sizeBytes: size11MiB * 2 ** 20 })),
    );
  if (only.has(12))
    await attempt('12', () =>
      scenario12({
        reps,
        sizeBytes: size12MiB * 2 ** 20,
        ns: n12,
        schedulerRetries: retries12,
        seedFirst: values['seed-first12'] === true,
        checksums: values['checksums12'] === true,
        hub: values['hub12'] === true,
      }),
    );
  if (only.has(13))
    await attempt('13', () =>
      withControlPlane((cp) => scenario13(cp, { reps, sizeBytes: size13MiB * 2 ** 20 })),
    );

  if (only.has(14))
    await attempt('14', () =>
      withControlPlane((cp) => scenario14(cp, { reps, sizeBytes: size14MiB * 2 ** 20 })),
    );

  if (only.has(15)) await attempt('15', () => withControlPlane((cp) => scenario15(cp, { reps })));

  rows.sort((a, b) => a.id.localeCompare(b.id, 'en', { numeric: true }));
  const result = {
    date: new Date().toISOString(),
    durationSeconds: Math.round((Date.now() - started) / 1000),
    options: {
      only: [...only],
      reps,
      workers,
      sizeMiB,
      originMBps,
      idleSeconds,
      size8MiB,
      pollMs,
      size11MiB,
      size12MiB,
      size13MiB,
      size14MiB,
    },
    machine: info,
    rows,
    errors,
    raw,
  };
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(result, null, 2) + '\n');
  console.log(table(rows));
  console.log('');
  for (const r of rows) if (r.notes) console.log(`- ${r.id}: ${r.notes}`);
  for (const [id, e] of Object.entries(errors))
    console.log(`- scenario ${id} did not complete: ${e.split('\n')[0]}`);
  console.log(
    `\n${rows.filter((r) => r.pass === false).length} FAIL, ${rows.filter((r) => r.pass === true).length} PASS; JSON: ${out}; ${result.durationSeconds} s`,
  );
  return Object.keys(errors).length > 0 ? 1 : 0;
}

const code = await main();
process.exitCode = code;
// Every server and child of the scenarios is closed in their finally blocks; should a handle still leak, do not
// let it keep `npm run bench` alive.
setTimeout(() => process.exit(code), 10_000).unref();
