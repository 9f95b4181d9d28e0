/**
 * `peerload operator` (bin/peerload.js, the product controllers) as a separate process against the test apiserver,
 * as a cluster runs it: nothing of the test process is shared with it but the kubeconfig and the flags.
 */
import { readFile } from 'node:fs/promises';
import { expect } from 'vitest';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT, waitFor } from './kube.ts';
import { freePort } from './ports.ts';
import { startProcess, type ManagedProcess } from './process.ts';

export interface OperatorProcess {
  process: ManagedProcess;
  /** Its health and metrics server. */
  url(path: string): string;
  /** Everything it logged (stdout and stderr). */
  logs(): Promise<string>;
  /** SIGTERM, then SIGKILL after the grace period; resolves with its exit code. */
  stop(): Promise<number | null>;
}

/** Starts the operator with `flags` (`--kubeconfig` and `--metrics-address` are added) and waits for /readyz. */
export async function startOperatorProcess(
  kubeconfigPath: string,
  flags: string[],
  opts: { name?: string; env?: Record<string, string> } = {},
): Promise<OperatorProcess> {
  const port = await freePort();
  const name = opts.name ?? 'operator';
  const logPath = join(tmpdir(), `peerload-${name}-${process.pid}-${Date.now()}.log`);
  const proc = startProcess(
    name,
    join(REPO_ROOT, 'node_modules/.bin/node'),
    [
      join(REPO_ROOT, 'bin/peerload.js'),
      'operator',
      '--kubeconfig',
      kubeconfigPath,
      '--metrics-address',
      `127.0.0.1:${port}`,
      '--shutdown-timeout',
      '10s',
      ...flags,
    ],
    logPath,
    { env: { ...process.env, ...opts.env } },
  );
  const url = (path: string) => `http://127.0.0.1:${port}${path}`;
  const logs = () => readFile(logPath, 'utf8').catch(() => '');
  const stop = async () => {
    await proc.stop(15_000);
    return proc.child.exitCode;
  };
  try {
    await waitFor(
      'the operator process to be ready',
      async () => {
        if (proc.child.exitCode !== null || proc.child.signalCode !== null)
          throw new Error(
            `the operator exited (${proc.child.exitCode ?? proc.child.signalCode}):\n${await logs()}`,
          );
        return (await fetch(url('/readyz')).catch(() => undefined))?.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
  return { process: proc, url, logs, stop };
}

/** The resident set size of process `pid` now, in bytes (VmRSS of /proc/<pid>/status). */
export async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
}

/** Samples `pid`'s RSS every `everyMs` until stop(): how a test bounds a process's memory under load. */
export function sampleRSS(pid: number, everyMs = 50): { peak(): number; stop(): void } {
  let peak = 0;
  const timer = setInterval(() => {
    void rssOf(pid)
      .then((r) => (peak = Math.max(peak, r)))
      .catch(() => undefined);
  }, everyMs);
  return { peak: () => peak, stop: () => clearInterval(timer) };
}

/**
 * An operator process watched through a hostile load: its pid when the watch began (a restart would change it) and
 * its RSS, sampled until stop().
 */
export function watchOperator(operator: OperatorProcess) {
  const pid = operator.process.child.pid!;
  const rss = sampleRSS(pid);
  const exited = () => operator.process.child.exitCode !== null || operator.process.child.signalCode !== null;
  return {
    pid,
    idleRSS: () => rssOf(pid),
    peakRSS: rss.peak,
    stop: rss.stop,
    /** Throws, with the end of its log, once the operator has exited: a wait under the load stops there. */
    async failIfExited(): Promise<void> {
      if (exited()) throw new Error(`the operator exited:\n${(await operator.logs()).slice(-2_000)}`);
    },
    /**
     * Checks that the operator came through the load unharmed: still the same process (never restarted), running,
     * ready, and never out of heap. Returns its log, for the test's own checks of what it must not say.
     */
    async expectUnharmed(): Promise<string> {
      expect(operator.process.child.exitCode).toBeNull();
      expect(operator.process.child.signalCode).toBeNull();
      expect(operator.process.child.pid).toBe(pid);
      expect((await fetch(operator.url('/readyz'))).status).toBe(200);
      const log = await operator.logs();
      expect(log).not.toMatch(/heap limit|out of memory/i);
      return log;
    },
  };
}
