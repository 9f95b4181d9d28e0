/**
 * The real OCI registry: CNCF Distribution's `registry` (v3, built by scripts/setup-registry.sh), started as a
 * process on loopback with a filesystem store of its own. Anonymous by default; with a token server
 * (registry-token.ts) it demands Bearer tokens and verifies them (signature against the server's JWKS, issuer,
 * audience, expiry, granted actions).
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dump } from 'js-yaml';
import { freePort } from './ports.ts';
import { setUpTool, startProcess, waitFor, type ManagedProcess } from './process.ts';
import { TOKEN_ISSUER, TOKEN_SERVICE, type TokenServer } from './registry-token.ts';

export const REGISTRY_VERSION = 'v3.1.2';

export interface Registry {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /** `127.0.0.1:<port>`, as references write it. */
  host: string;
  process: ManagedProcess;
  logs(): Promise<string>;
  stop(): Promise<void>;
}

/** The directory with `registry`: $PEERLOAD_REGISTRY_BIN, else the set-up's (built on first use). */
export const registryBinDir = () => setUpTool('setup-registry.sh', 'PEERLOAD_REGISTRY_BIN');

/** The directory with `modctl`: $PEERLOAD_MODCTL_BIN, else the set-up's (built on first use). */
export const modctlBinDir = () => setUpTool('setup-modctl.sh', 'PEERLOAD_MODCTL_BIN');

export async function startRegistry(opts: { tokens?: TokenServer; host?: string } = {}): Promise<Registry> {
  const bin = await registryBinDir();
  const host = opts.host ?? '127.0.0.1';
  const dir = await mkdtemp(join(tmpdir(), 'peerload-registry-'));
  const port = await freePort(host);
  await mkdir(join(dir, 'store'));
  const config: Record<string, unknown> = {
    version: 0.1,
    log: { level: 'info', formatter: 'text' },
    storage: { filesystem: { rootdirectory: join(dir, 'store') }, delete: { enabled: true } },
    http: { addr: `${host}:${port}`, secret: 'peerload-test-registry-secret' },
  };
  if (opts.tokens) {
    await opts.tokens.writeJwks(join(dir, 'jwks.json'));
    config['auth'] = {
      token: {
        realm: opts.tokens.realm,
        service: TOKEN_SERVICE,
        issuer: TOKEN_ISSUER,
        jwks: join(dir, 'jwks.json'),
      },
    };
  }
  await writeFile(join(dir, 'config.yml'), dump(config));
  const proc = startProcess(
    'registry',
    join(bin, 'registry'),
    ['serve', join(dir, 'config.yml')],
    join(dir, 'registry.log'),
    {
      env: { ...process.env, OTEL_TRACES_EXPORTER: 'none', OTEL_SDK_DISABLED: 'true' },
    },
  );
  const url = `http://${host}:${port}`;
  const stop = async () => {
    await proc.stop(5_000);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      'the registry to answer /v2/',
      async () => {
        if (proc.child.exitCode !== null)
          throw new Error(`registry exited: ${await readFile(proc.logPath, 'utf8')}`);
        const res = await fetch(`${url}/v2/`);
        return res.status === 200 || res.status === 401;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
  } catch (e) {
    await stop();
    throw e;
  }
  return { url, host: `${host}:${port}`, process: proc, logs: () => readFile(proc.logPath, 'utf8'), stop };
}
