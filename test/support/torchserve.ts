/**
 * A REAL TorchServe 0.12.0 (PyPI, from the virtualenv of scripts/setup-torchserve.sh) for e2e tests.
 *
 * Each instance is isolated: its own working directory (TorchServe writes key_file.json there), its own TMPDIR
 * (the pid file `$TMPDIR/.model_server.pid` and the workers' Unix sockets live there), free loopback ports for
 * inference, management, metrics and the first worker, its own model store and plugins directory, and a
 * ts-config file (so no config.properties of the current directory and no snapshots are picked up). Token
 * authorization is ON unless `tokenAuth: false`; the keys are read from key_file.json.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);

export interface TorchServeKeys {
  management: string;
  inference: string;
  /** The API key: does not expire; rotates the other two through GET /token. */
  api: string;
}

export interface TorchServeOptions {
  /** Jars copied into the plugins directory (e.g. the endpoint plugin of scripts/build-plugin.sh). */
  pluginJars?: string[];
  /** Token authorization (default true, as in TorchServe 0.12). */
  tokenAuth?: boolean;
  /** Extra environment (e.g. P2P_ENDPOINT_CONFIG for the plugin). */
  env?: Record<string, string>;
  /** Extra ts-config lines (key=value). */
  config?: Record<string, string>;
  /** JVM options of the frontend (ts-config `vmargs`); default `-Xmx512m -XX:+UseG1GC`. */
  vmargs?: string;
  /** An existing model store; default a fresh directory inside the instance's work dir. */
  modelStore?: string;
  /** How long to wait for the server to answer /ping (default 120 s). */
  startTimeoutMs?: number;
  /**
   * An existing working directory, kept on stop: starting again on it (with the same addresses in `config`) is
   * a restart of the same pod's container -- key_file.json is rewritten in place with new keys.
   */
  workDir?: string;
}

export interface TorchServe {
  managementURL: string;
  inferenceURL: string;
  metricsURL: string;
  /** Empty strings when token authorization is off. */
  keys: TorchServeKeys;
  /** `Authorization` header for the management API ({} when token auth is off). */
  managementAuth(): Record<string, string>;
  /** `Authorization` header for the inference API ({} when token auth is off). */
  inferenceAuth(): Record<string, string>;
  /** The frontend JVM's pid (for jcmd / jstat). */
  pid: number;
  workDir: string;
  modelStore: string;
  pluginsDir: string;
  logPath: string;
  /** The frontend's own log (ts_log.log), for diagnosis. */
  logsDir: string;
  stop(): Promise<void>;
}

/** The TorchServe virtualenv's bin directory: $PEERLOAD_TORCHSERVE_BIN, else scripts/setup-torchserve.sh. */
export async function torchServeBinDir(): Promise<string> {
  if (process.env['PEERLOAD_TORCHSERVE_BIN']) return process.env['PEERLOAD_TORCHSERVE_BIN'];
  const { stdout } = await run('bash', [join(REPO_ROOT, 'scripts/setup-torchserve.sh')], {
    maxBuffer: 16 << 20,
    timeout: 3_600_000,
  });
  return stdout.trim().split('\n').pop()!;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function startTorchServe(opts: TorchServeOptions = {}): Promise<TorchServe> {
  const bin = await torchServeBinDir();
  const ownWorkDir = !opts.workDir;
  const workDir = opts.workDir ?? (await mkdtemp(join(tmpdir(), 'peerload-torchserve-')));
  const tmp = join(workDir, 'tmp');
  const modelStore = opts.modelStore ?? join(workDir, 'model-store');
  const pluginsDir = join(workDir, 'plugins');
  const logsDir = join(workDir, 'logs');
  await Promise.all([tmp, modelStore, pluginsDir, logsDir].map((d) => mkdir(d, { recursive: true })));
  for (const jar of opts.pluginJars ?? []) await copyFile(jar, join(pluginsDir, basename(jar)));

  const [inference, management, metrics, workerPort] = await distinctFreePorts(4);
  const tokenAuth = opts.tokenAuth ?? true;
  const config: Record<string, string> = {
    inference_address: `http://127.0.0.1:${inference}`,
    management_address: `http://127.0.0.1:${management}`,
    metrics_address: `http://127.0.0.1:${metrics}`,
    initial_worker_port: String(workerPort),
    // java.io.tmpdir: the frontend puts the workers' Unix sockets there (TMPDIR alone does not move them).
    vmargs: `${opts.vmargs ?? '-Xmx512m -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError'} -Djava.io.tmpdir=${tmp}`,
    default_workers_per_model: '1',
    install_py_dep_per_model: 'false',
    ...(tokenAuth ? {} : { disable_token_authorization: 'true' }),
    ...opts.config,
  };
  const configPath = join(workDir, 'config.properties');
  await writeFile(
    configPath,
    Object.entries(config)
      .map(([k, v]) => `${k}=${v}\n`)
      .join(''),
  );

  const env: Record<string, string> = {
    PATH: `${bin}:${process.env['PATH'] ?? '/usr/bin:/bin'}`,
    HOME: process.env['HOME'] ?? workDir,
    TMPDIR: tmp,
    LOG_LOCATION: logsDir,
    METRICS_LOCATION: logsDir,
    // One CPU thread per worker: the machine is shared.
    OMP_NUM_THREADS: '1',
    ...(process.env['JAVA_HOME'] ? { JAVA_HOME: process.env['JAVA_HOME'] } : {}),
    ...opts.env,
  };
  const args = [
    '--start',
    '--foreground',
    '--ncs',
    '--model-store',
    modelStore,
    '--plugins-path',
    pluginsDir,
    '--ts-config',
    configPath,
    ...(tokenAuth ? [] : ['--disable-token-auth']),
  ];
  const logPath = join(workDir, 'torchserve.out');
  const proc: ManagedProcess = startProcess('torchserve', join(bin, 'torchserve'), args, logPath, {
    cwd: workDir,
    env,
  });

  // From the config, which `opts.config` may override (a restart on the same addresses).
  const managementURL = config.management_address!;
  const inferenceURL = config.inference_address!;
  const metricsURL = config.metrics_address!;
  let keys: TorchServeKeys = { management: '', inference: '', api: '' };
  let pid = 0;

  const stop = async () => {
    // `torchserve --stop` finds the JVM through $TMPDIR/.model_server.pid; then make sure both processes are gone.
    await run(join(bin, 'torchserve'), ['--stop'], { cwd: workDir, env, timeout: 30_000 }).catch(
      () => undefined,
    );
    if (pid && isAlive(pid)) {
      await waitFor('the TorchServe JVM to exit', () => !isAlive(pid), { timeoutMs: 20_000 }).catch(() => {
        if (isAlive(pid)) process.kill(pid, 'SIGKILL');
      });
    }
    await proc.stop(10_000);
    if (ownWorkDir) await rm(workDir, { recursive: true, force: true });
  };

  try {
    await waitFor(
      'TorchServe to answer /ping',
      async () => {
        if (proc.child.exitCode !== null) {
          const log = await readFile(logPath, 'utf8').catch(() => '');
          throw new Error(`torchserve exited (${proc.child.exitCode}):\n${log.slice(-4000)}`);
        }
        if (tokenAuth) {
          const text = await readFile(join(workDir, 'key_file.json'), 'utf8').catch(() => undefined);
          if (!text) return false;
          const k = JSON.parse(text) as Record<string, { key: string }>;
          keys = { management: k['management']!.key, inference: k['inference']!.key, api: k['API']!.key };
        }
        const res = await fetch(`${inferenceURL}/ping`, {
          headers: tokenAuth ? { authorization: `Bearer ${keys.inference}` } : {},
          signal: AbortSignal.timeout(10_000),
        });
        await res.arrayBuffer();
        return res.status === 200;
      },
      { timeoutMs: opts.startTimeoutMs ?? 120_000, intervalMs: 250 },
    );
    pid = Number((await readFile(join(tmp, '.model_server.pid'), 'utf8')).trim());
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }

  return {
    managementURL,
    inferenceURL,
    metricsURL,
    keys,
    managementAuth: (): Record<string, string> =>
      tokenAuth ? { authorization: `Bearer ${keys.management}` } : {},
    inferenceAuth: (): Record<string, string> =>
      tokenAuth ? { authorization: `Bearer ${keys.inference}` } : {},
    pid,
    workDir,
    modelStore,
    pluginsDir,
    logPath,
    logsDir,
    stop,
  };
}

async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}
