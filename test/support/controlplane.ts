/**
 * A real Kubernetes control plane for tests: etcd + kube-apiserver, nothing else (the envtest pattern).
 * Binaries come from scripts/setup-control-plane.sh (built from the Go module proxy and cached).
 *
 * Security is on as in a cluster: TLS (the apiserver's self-signed serving cert is trusted explicitly),
 * token authentication, RBAC authorization, service-account signing keys. The admin identity is in
 * `system:masters`; tests that need a narrower identity use impersonation.
 */
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

const REPO_ROOT = resolve(import.meta.dirname, '../..');

export interface ControlPlane {
  /** https://127.0.0.1:<port> */
  server: string;
  /** Path of a kubeconfig with the admin identity. */
  kubeconfigPath: string;
  /** Bearer token of the admin identity (system:masters). */
  adminToken: string;
  /** PEM of the CA that signed the apiserver's serving certificate. */
  caPEM: string;
  /** `gitVersion` reported by the apiserver, e.g. v1.33.13. */
  version: string;
  etcdURL: string;
  dir: string;
  /** Stops the apiserver only (etcd keeps the data). */
  stopApiserver(): Promise<void>;
  /** Starts the apiserver again on the same port with the same data and keys. */
  startApiserver(): Promise<void>;
  stop(): Promise<void>;
}

export interface ControlPlaneOptions {
  binDir?: string;
  extraApiserverArgs?: string[];
  /** Keep the temporary directory (logs, data) after stop, for debugging. */
  keepDir?: boolean;
}

/** Runs the idempotent set-up script and returns the directory holding kube-apiserver and etcd. */
export function controlPlaneBinDir(): string {
  if (process.env.PEERLOAD_CONTROL_PLANE_BIN) return process.env.PEERLOAD_CONTROL_PLANE_BIN;
  return execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-control-plane.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
}

export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const binDir = opts.binDir ?? controlPlaneBinDir();
  const dir = mkdtempSync(join(tmpdir(), 'peerload-cp-'));
  const certDir = join(dir, 'certs');
  mkdirSync(certDir);

  const [etcdClientPort, etcdPeerPort, apiPort] = [await freePort(), await freePort(), await freePort()];
  const etcdURL = `http://127.0.0.1:${etcdClientPort}`;
  const etcd = startProcess(
    'etcd',
    join(binDir, 'etcd'),
    [
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${etcdURL}`,
      `--advertise-client-urls=${etcdURL}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeerPort}`,
      `--initial-cluster=default=http://127.0.0.1:${etcdPeerPort}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ],
    join(dir, 'etcd.log'),
  );
  await waitFor('etcd health', async () => (await fetch(`${etcdURL}/health`)).ok, { timeoutMs: 30_000 });

  const adminToken = randomBytes(24).toString('hex');
  writeFileSync(join(dir, 'tokens.csv'), `${adminToken},admin,admin-uid,"system:masters"\n`, { mode: 0o600 });
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  writeFileSync(join(dir, 'sa.key'), privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  writeFileSync(join(dir, 'sa.pub'), publicKey.export({ type: 'spki', format: 'pem' }));

  const apiArgs = [
    `--etcd-servers=${etcdURL}`,
    '--bind-address=127.0.0.1',
    '--advertise-address=127.0.0.1',
    `--secure-port=${apiPort}`,
    `--cert-dir=${certDir}`,
    `--token-auth-file=${join(dir, 'tokens.csv')}`,
    '--authorization-mode=RBAC',
    '--service-cluster-ip-range=10.0.0.0/24',
    '--service-account-issuer=https://kubernetes.default.svc',
    `--service-account-key-file=${join(dir, 'sa.pub')}`,
    `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
    // No controller-manager runs, so nothing would create the `default` ServiceAccount pods refer to.
    '--disable-admission-plugins=ServiceAccount',
    '--allow-privileged=true',
    '--v=1',
    ...(opts.extraApiserverArgs ?? []),
  ];
  const server = `https://127.0.0.1:${apiPort}`;
  let apiserver: ManagedProcess | undefined;
  let caPEM = '';

  const startApiserver = async () => {
    apiserver = startProcess(
      'kube-apiserver',
      join(binDir, 'kube-apiserver'),
      apiArgs,
      join(dir, 'apiserver.log'),
    );
    const early = apiserver.exited.then((code) => {
      throw new Error(`kube-apiserver exited with ${code}; log: ${join(dir, 'apiserver.log')}`);
    });
    early.catch(() => undefined);
    await Promise.race([
      early,
      waitFor(
        'kube-apiserver /readyz',
        async () => {
          // The serving cert is generated by the apiserver on first start; its chain is our trust root.
          caPEM ||= readFileSync(join(certDir, 'apiserver.crt'), 'utf8');
          return (await get(server, '/readyz', adminToken, caPEM)).status === 200;
        },
        { timeoutMs: 90_000, intervalMs: 250 },
      ),
    ]);
  };
  await startApiserver();

  const version = JSON.parse((await get(server, '/version', adminToken, caPEM)).body).gitVersion as string;
  const kubeconfigPath = join(dir, 'kubeconfig');
  writeFileSync(kubeconfigPath, kubeconfig(server, caPEM, adminToken), { mode: 0o600 });

  return {
    server,
    kubeconfigPath,
    adminToken,
    caPEM,
    version,
    etcdURL,
    dir,
    async stopApiserver() {
      await apiserver?.stop();
    },
    startApiserver,
    async stop() {
      await apiserver?.stop();
      await etcd.stop();
      if (!opts.keepDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

function kubeconfig(server: string, caPEM: string, token: string): string {
  const ca = Buffer.from(caPEM).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: peerload-test',
    `  cluster: {server: "${server}", certificate-authority-data: "${ca}"}`,
    'users:',
    '- name: admin',
    `  user: {token: "${token}"}`,
    'contexts:',
    '- name: peerload-test',
    '  context: {cluster: peerload-test, user: admin}',
    'current-context: peerload-test',
    '',
  ].join('\n');
}

function get(
  server: string,
  path: string,
  token: string,
  ca: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${server}${path}`,
      { headers: { authorization: `Bearer ${token}` }, ca, timeout: 5000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}
