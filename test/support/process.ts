import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

export interface ManagedProcess {
  name: string;
  child: ChildProcess;
  logPath: string;
  /** Sends SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
  kill(signal?: NodeJS.Signals): Promise<void>;
  exited: Promise<number | null>;
}

/** Starts a child process whose output goes to a log file (printed on unexpected exit for diagnosis). */
export function startProcess(
  name: string,
  command: string,
  args: string[],
  logPath: string,
  opts: SpawnOptions = {},
): ManagedProcess {
  const log = createWriteStream(logPath, { flags: 'a' });
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const kill = async (signal: NodeJS.Signals = 'SIGKILL') => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
  };
  return {
    name,
    child,
    logPath,
    exited,
    kill,
    async stop(graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls `check` until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  { timeoutMs = 30_000, intervalMs = 100 } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const detail = lastError instanceof Error ? `: ${lastError.message}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** bin/peerload.js: the CLI as a user runs it. */
export const PEERLOAD_BIN = join(import.meta.dirname, '../../bin/peerload.js');

/**
 * Runs `peerload args` with this Node (given `nodeArgs` before the script) and `env` (the test's own by default);
 * resolves with its exit code and output whatever the code, for the test to assert on.
 */
export function runPeerload(
  args: string[],
  o: { nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return promisify(execFile)(process.execPath, [...(o.nodeArgs ?? []), PEERLOAD_BIN, ...args], {
    env: o.env ?? process.env,
  }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({
      code: e.code,
      stdout: e.stdout,
      stderr: e.stderr,
    }),
  );
}

/**
 * What a tool's set-up script (scripts/`script`, which builds or downloads it once and caches it) prints on its last
 * line, a directory or a path; `$env` names one already at hand and skips the script. Every external tool the tests
 * start (MinIO, the registry, Dragonfly, TorchServe, Triton…) is found this way.
 */
export async function setUpTool(
  script: string,
  env: string,
  o: { timeoutMs?: number } = {},
): Promise<string> {
  if (process.env[env]) return process.env[env];
  const { stdout } = await promisify(execFile)('bash', [join(import.meta.dirname, '../../scripts', script)], {
    maxBuffer: 16 << 20,
    timeout: o.timeoutMs ?? 3_600_000,
  });
  return stdout.trim().split('\n').pop()!;
}
