/**
 * `peerload fetch` as a process of its own (`node bin/peerload.js fetch …`), as each node runs its own agent: the
 * placements of several nodes in one bench process would share its one JavaScript thread, with each other and
 * with the bench's counting proxies in front of the origins, and a daemon whose response body is not drained for
 * 10 s fails its download (client 1.4.2 sends each finished piece to the proxy's stream with that time-out).
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const ROOT = join(import.meta.dirname, '..', '..');

/** GNU time, when the machine has it: how the process's CPU seconds are read once it has exited. */
const GNU_TIME = '/usr/bin/time';
const CPU_LINE = 'peerload-bench-cpu ';

/**
 * Runs `peerload fetch <argv>`; resolves with its exit code, its stdout and stderr lines, and the CPU seconds it used
 * (user + system; undefined without GNU time).
 */
export function peerloadFetchProcess(
  argv: string[],
): Promise<{ code: number; out: string[]; err: string[]; cpuSeconds: number | undefined }> {
  // PEERLOAD_BENCH_CPU_PROF=<dir>: each placement writes a V8 CPU profile there (open it in Chrome's DevTools).
  // PEERLOAD_BENCH_FETCH_LOG=<dir>: each placement logs at debug level (every file's fetch and check times) into
  // <dir>/<pid>.log.
  const profile = process.env['PEERLOAD_BENCH_CPU_PROF'];
  const logDir = process.env['PEERLOAD_BENCH_FETCH_LOG'];
  const command = [
    process.execPath,
    ...(profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : []),
    join(ROOT, 'bin/peerload.js'),
    'fetch',
    ...argv,
    ...(logDir ? ['--log-level', 'debug'] : []),
  ];
  const timed = existsSync(GNU_TIME);
  const child = timed
    ? spawn(GNU_TIME, ['-f', `${CPU_LINE}%U %S`, ...command], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  const out: string[] = [];
  const err: string[] = [];
  let cpuSeconds: number | undefined;
  createInterface({ input: child.stdout }).on('line', (l) => out.push(l));
  const log = logDir ? createWriteStream(join(logDir, `${child.pid}.log`)) : undefined;
  createInterface({ input: child.stderr }).on('line', (l) => {
    if (!l.startsWith(CPU_LINE)) {
      if (log) log.write(`${l}\n`);
      else err.push(l);
      return;
    }
    const [user, system] = l.slice(CPU_LINE.length).split(' ').map(Number);
    cpuSeconds = (user ?? 0) + (system ?? 0);
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => {
      log?.end();
      resolve({ code: code ?? (signal ? 128 : 1), out, err, cpuSeconds });
    });
  });
}
