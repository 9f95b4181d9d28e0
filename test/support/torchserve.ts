/**
 * A REAL TorchServe 0.12.0 (PyPI, from the virtualenv of scripts/setup-torchserve.sh) for e2e tests.
 *
 * Each instance is isolated: its own working directory (TorchServe writes key_file.json there), its own TMPDIR
 * (the pid file `$TMPDIR/.model_server.pid` and the workers' Unix sockets live there), free loopback ports for
 * inference, management, metrics, both gRPC servers and the first worker, its own model store and plugins directory, and a
 * ts-config file (so no config.properties of the current directory and no snapshots are picked up). Token
 * authorization is ON unless `tokenAuth: false`; the keys are read from key_file.json.
 *
 * By default TorchServe runs as the test process does (root here). With `runAs` it runs as that non-root user with
 * no capabilities at all (setpriv from util-linux), as the `restricted` Pod Security level has a container run:
 * its work dir and model store are given to that user, and everything else it reads must be readable by it.
 */
import { execFile } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';
import { setUpTool, startProcess, waitFor, type ManagedProcess } from './process.ts';

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
  /**
   * Run the frontend and its workers as this non-root user and group (numeric; no passwd entry needed), with no
   * supplementary groups, no capabilities (bounding set emptied too) and no_new_privs. Default: the test
   * process's own user.
   */
  runAs?: { uid: number; gid: number };
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
  /** The uid TorchServe runs as (`runAs`, else the test process's). */
  uid: number;
  workDir: string;
  modelStore: string;
  pluginsDir: string;
  logPath: string;
  /** The frontend's own log (ts_log.log), for diagnosis. */
  logsDir: string;
  stop(): Promise<void>;
}

/** The TorchServe virtualenv's bin directory: $PEERLOAD_TORCHSERVE_BIN, else scripts/setup-torchserve.sh. */
export const torchServeBinDir = () => setUpTool('setup-torchserve.sh', 'PEERLOAD_TORCHSERVE_BIN');

/** setpriv's arguments that drop to `ids` before running what follows them. */
function dropTo(ids: { uid: number; gid: number }): string[] {
  return [
    `--reuid=${ids.uid}`,
    `--regid=${ids.gid}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
    '--',
  ];
}

/**
 * A bin directory of the TorchServe virtualenv that `ids` can use. The cached one usually sits under root's home
 * (0700), which another user cannot enter; rather than open root's home to every user, the virtualenv is mirrored
 * once with hard links (`cp -al`: new directories, the same files, no copied bytes) into the temp dir, keyed by the
 * virtualenv's pyvenv.cfg inode so a rebuilt one gets a new mirror. Python finds a virtualenv from the path it is
 * started by, so the mirror's `bin/python` runs it; its scripts' `#!` lines still name the cached path, so they are
 * run through that python.
 */
async function binDirFor(bin: string, ids: { uid: number; gid: number }): Promise<string> {
  const usable = await run('setpriv', [...dropTo(ids), join(bin, 'python'), '-c', 'import ts'], {
    timeout: 60_000,
  }).then(
    () => true,
    () => false,
  );
  if (usable) return bin;
  const venv = dirname(bin);
  const mirror = join(tmpdir(), `peerload-${basename(venv)}-${(await stat(join(venv, 'pyvenv.cfg'))).ino}`);
  const done = join(mirror, '.mirrored');
  if (!(await stat(done).catch(() => undefined))) {
    const staging = `${mirror}.${process.pid}.tmp`;
    await rm(staging, { recursive: true, force: true });
    await run('cp', ['-al', venv, staging], { timeout: 600_000 });
    await writeFile(join(staging, '.mirrored'), '');
    // Another test file may have won the race: its mirror is as good as this one.
    await rename(staging, mirror).catch(() => rm(staging, { recursive: true, force: true }));
  }
  await run('setpriv', [...dropTo(ids), join(mirror, 'bin', 'python'), '-c', 'import ts'], {
    timeout: 60_000,
  }).catch((err: Error) => {
    throw new Error(
      `uid ${ids.uid} cannot run TorchServe from ${mirror} (mirrored from ${venv}): ${err.message}`,
    );
  });
  return join(mirror, 'bin');
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
  const cachedBin = await torchServeBinDir();
  const runAs = opts.runAs;
  if (runAs && (runAs.uid === 0 || runAs.gid === 0)) throw new Error('runAs: a non-root uid and gid');
  const bin = runAs ? await binDirFor(cachedBin, runAs) : cachedBin;
  const ownWorkDir = !opts.workDir;
  const workDir = opts.workDir ?? (await mkdtemp(join(tmpdir(), 'peerload-torchserve-')));
  const tmp = join(workDir, 'tmp');
  const modelStore = opts.modelStore ?? join(workDir, 'model-store');
  const pluginsDir = join(workDir, 'plugins');
  const logsDir = join(workDir, 'logs');
  await Promise.all([tmp, modelStore, pluginsDir, logsDir].map((d) => mkdir(d, { recursive: true })));
  for (const jar of opts.pluginJars ?? []) await copyFile(jar, join(pluginsDir, basename(jar)));

  // Distinct from the ports the caller's config names: a free port the caller chose is free until the server binds it.
  const [inference, management, metrics, workerPort, grpcInference, grpcManagement] = await distinctFreePorts(
    6,
    portsNamedIn(opts.config ?? {}),
  );
  const tokenAuth = opts.tokenAuth ?? true;
  const config: Record<string, string> = {
    inference_address: `http://127.0.0.1:${inference}`,
    management_address: `http://127.0.0.1:${management}`,
    metrics_address: `http://127.0.0.1:${metrics}`,
    initial_worker_port: String(workerPort),
    // The gRPC servers start after the REST ones, on 7070/7071 unless told: a second instance would answer /ping,
    // then fail to bind them and shut down under its first requests.
    grpc_inference_address: '127.0.0.1',
    grpc_management_address: '127.0.0.1',
    grpc_inference_port: String(grpcInference),
    grpc_management_port: String(grpcManagement),
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

  if (runAs) {
    // Everything TorchServe writes: key_file.json (work dir), pid file and worker sockets (tmp), logs, the model
    // store (the plugin's archives). Files with more than one link are left alone: an archive in the model store
    // may be a hard link of a peer daemon's cache file, which must stay the daemon's.
    const own = [workDir, modelStore].filter((d, i) => i === 0 || !d.startsWith(`${workDir}/`));
    await run('find', [
      ...own,
      '(',
      '-type',
      'd',
      '-o',
      '-links',
      '1',
      ')',
      '-exec',
      'chown',
      '-h',
      `${runAs.uid}:${runAs.gid}`,
      '{}',
      '+',
    ]);
  }

  const env: Record<string, string> = {
    PATH: `${bin}:${process.env['PATH'] ?? '/usr/bin:/bin'}`,
    // Another user's home is not writable to it (torch and pip cache there): the work dir is.
    HOME: runAs ? workDir : (process.env['HOME'] ?? workDir),
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
  const proc: ManagedProcess = runAs
    ? startProcess(
        'torchserve',
        'setpriv',
        [...dropTo(runAs), join(bin, 'python'), join(bin, 'torchserve'), ...args],
        logPath,
        { cwd: workDir, env },
      )
    : startProcess('torchserve', join(bin, 'torchserve'), args, logPath, { cwd: workDir, env });

  // From the config, which `opts.config` may override (a restart on the same addresses).
  const managementURL = config.management_address!;
  const inferenceURL = config.inference_address!;
  const metricsURL = config.metrics_address!;
  let keys: TorchServeKeys = { management: '', inference: '', api: '' };
  let pid = 0;

  const stop = async () => {
    // `torchserve --stop` finds the JVM through $TMPDIR/.model_server.pid; then make sure both processes are gone.
    // Run as the test process, which may signal TorchServe whichever user it runs as.
    await run(join(cachedBin, 'torchserve'), ['--stop'], { cwd: workDir, env, timeout: 30_000 }).catch(
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
    uid: runAs?.uid ?? process.getuid?.() ?? 0,
    workDir,
    modelStore,
    pluginsDir,
    logPath,
    logsDir,
    stop,
  };
}

async function distinctFreePorts(n: number, avoid: Set<number>): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) {
    const port = await freePort();
    if (!avoid.has(port)) ports.add(port);
  }
  return [...ports];
}

/** The ports a TorchServe config names: in its addresses (`http://host:port`) and its `*_port` keys. */
function portsNamedIn(config: Record<string, string>): Set<number> {
  const ports = new Set<number>();
  for (const [key, value] of Object.entries(config)) {
    const port = key.endsWith('_port') ? Number(value) : Number(/:(\d+)\/?$/.exec(value)?.[1]);
    if (Number.isInteger(port) && port > 0) ports.add(port);
  }
  return ports;
}
