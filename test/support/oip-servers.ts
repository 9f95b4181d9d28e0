/**
 * REAL Open Inference Protocol repository servers as processes, for e2e tests and the exchange recorder:
 * Triton Inference Server 2.51.0 (the CPU build of the PyPI wheel nvidia-pytriton 0.7.0, scripts/setup-triton.sh)
 * and MLServer 1.7.1 with its scikit-learn runtime (scripts/setup-mlserver.sh). Each on its own loopback address
 * and free ports, models loaded only when asked (Triton `--model-control-mode=explicit`, MLServer
 * `load_models_at_startup: false`), no gRPC or metrics listener beyond what the server insists on.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';
import { setUpTool, startProcess, waitFor, type ManagedProcess } from './process.ts';

const run = promisify(execFile);

export interface OipServer {
  kind: 'triton' | 'mlserver';
  /** `http://host:port` of the HTTP API (inference, health, repository). */
  url: string;
  repository: string;
  logPath: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

export interface OipServerOptions {
  /** Loopback address to listen on (default 127.0.0.1). */
  host?: string;
  /** The model repository (default a fresh directory). */
  repository?: string;
  startTimeoutMs?: number;
}

/** The directory of Triton's wrapper (scripts/setup-triton.sh), or $PEERLOAD_TRITON_BIN. */
export const tritonBinDir = () => setUpTool('setup-triton.sh', 'PEERLOAD_TRITON_BIN');
/** MLServer's virtualenv bin directory (scripts/setup-mlserver.sh), or $PEERLOAD_MLSERVER_BIN. */
export const mlserverBinDir = () => setUpTool('setup-mlserver.sh', 'PEERLOAD_MLSERVER_BIN');

async function ready(url: string, proc: ManagedProcess, timeoutMs: number): Promise<void> {
  let exited = false;
  void proc.exited.then(() => (exited = true));
  await waitFor(
    `${proc.name} at ${url}`,
    async () => {
      if (exited) throw new Error(`${proc.name} exited; log: ${proc.logPath}`);
      const res = await fetch(`${url}/v2/health/ready`).catch(() => undefined);
      return res?.status === 200;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

export async function startTriton(opts: OipServerOptions = {}): Promise<OipServer> {
  const bin = await tritonBinDir();
  const host = opts.host ?? '127.0.0.1';
  const work = await mkdtemp(join(tmpdir(), 'triton-'));
  const repository = opts.repository ?? join(work, 'models');
  await mkdir(repository, { recursive: true });
  const port = await freePort(host);
  const logPath = join(work, 'triton.log');
  const proc = startProcess(
    'tritonserver',
    join(bin, 'tritonserver'),
    [
      `--model-repository=${repository}`,
      '--model-control-mode=explicit',
      `--http-address=${host}`,
      `--http-port=${port}`,
      '--allow-grpc=false',
      '--allow-metrics=false',
      '--log-verbose=0',
    ],
    logPath,
    { cwd: work, env: { ...process.env, HOME: work } },
  );
  const url = `http://${host}:${port}`;
  await ready(url, proc, opts.startTimeoutMs ?? 60_000);
  return { kind: 'triton', url, repository, logPath, process: proc, stop: () => proc.stop(15_000) };
}

export async function startMLServer(opts: OipServerOptions = {}): Promise<OipServer> {
  const bin = await mlserverBinDir();
  const host = opts.host ?? '127.0.0.1';
  const work = await mkdtemp(join(tmpdir(), 'mlserver-'));
  const repository = opts.repository ?? join(work, 'models');
  await mkdir(repository, { recursive: true });
  const [http, grpc, metrics] = [await freePort(host), await freePort(host), await freePort(host)];
  // `mlserver start DIR` reads DIR/settings.json and takes DIR as the model repository (whatever the file says).
  await writeFile(
    join(repository, 'settings.json'),
    JSON.stringify({
      host,
      http_port: http,
      grpc_port: grpc,
      metrics_port: metrics,
      load_models_at_startup: false,
    }),
  );
  const logPath = join(work, 'mlserver.log');
  const proc = startProcess('mlserver', join(bin, 'mlserver'), ['start', repository], logPath, {
    cwd: work,
    env: { ...process.env, HOME: work, PATH: `${bin}:${process.env['PATH'] ?? '/usr/bin:/bin'}` },
  });
  const url = `http://${host}:${http}`;
  await ready(url, proc, opts.startTimeoutMs ?? 90_000);
  return { kind: 'mlserver', url, repository, logPath, process: proc, stop: () => proc.stop(15_000) };
}

/** A scikit-learn LinearRegression y = slope * x saved with joblib at `path` (MLServer's sklearn runtime loads it). */
export async function writeSklearnModel(path: string, slope: number): Promise<void> {
  const bin = await mlserverBinDir();
  const code = [
    'import sys, joblib, numpy as np',
    'from sklearn.linear_model import LinearRegression',
    'k = float(sys.argv[2])',
    'joblib.dump(LinearRegression().fit(np.array([[0.0], [1.0], [2.0]]), np.array([0.0, k, 2 * k])), sys.argv[1])',
  ].join('\n');
  await run(join(bin, 'python'), ['-c', code, path, String(slope)], { timeout: 120_000 });
}
