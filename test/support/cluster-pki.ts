/**
 * The real cluster's certificates (cluster.ts): one CA made with openssl signs the apiserver's serving certificate,
 * each component's client certificate (its user and groups as Kubernetes reads them: CN and O) and each kubelet's
 * serving certificate. Node's crypto makes no X.509 certificates, hence openssl. ECDSA P-256 keys: quick to make and
 * accepted by every component. Each certificate a random serial: they are made side by side (openssl's serial
 * file would be shared).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

export interface KeyPair {
  cert: string;
  key: string;
}

interface CertRequest {
  /** File name stem under the PKI directory. */
  name: string;
  cn: string;
  org?: string;
  server?: { ips: string[]; dns: string[] };
}

/** `openssl req` options for a new unencrypted P-256 key, written to the path that follows. */
const NEW_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout'];

export async function makeCA(dir: string): Promise<KeyPair> {
  const cert = join(dir, 'ca.crt');
  const key = join(dir, 'ca.key');
  await exec('openssl', [
    'req',
    '-x509',
    ...NEW_KEY,
    key,
    '-out',
    cert,
    '-days',
    '7',
    '-subj',
    '/CN=peerload-cluster-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
  return { cert, key };
}

export async function makeCert(dir: string, ca: KeyPair, req: CertRequest): Promise<KeyPair> {
  const key = join(dir, `${req.name}.key`);
  const csr = join(dir, `${req.name}.csr`);
  const cert = join(dir, `${req.name}.crt`);
  const ext = join(dir, `${req.name}.ext`);
  const subj = `/CN=${req.cn}${req.org ? `/O=${req.org}` : ''}`;
  await exec('openssl', ['req', '-new', ...NEW_KEY, key, '-out', csr, '-subj', subj]);
  const lines = ['basicConstraints=CA:FALSE', 'keyUsage=critical,digitalSignature,keyEncipherment'];
  if (req.server) {
    const sans = [...req.server.ips.map((ip) => `IP:${ip}`), ...req.server.dns.map((d) => `DNS:${d}`)];
    lines.push('extendedKeyUsage=serverAuth,clientAuth', `subjectAltName=${sans.join(',')}`);
  } else {
    lines.push('extendedKeyUsage=clientAuth');
  }
  writeFileSync(ext, `${lines.join('\n')}\n`);
  await exec('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-set_serial',
    `0x${randomBytes(16).toString('hex')}`,
    '-days',
    '7',
    '-extfile',
    ext,
    '-out',
    cert,
  ]);
  return { cert, key };
}

/** A kubeconfig for `server` with the CA and a client certificate embedded. */
export function kubeconfig(server: string, caPath: string, client: KeyPair, user: string): string {
  const b64 = (p: string) => readFileSync(p).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: peerload-cluster',
    `  cluster: {server: "${server}", certificate-authority-data: "${b64(caPath)}"}`,
    'users:',
    `- name: ${user}`,
    `  user: {client-certificate-data: "${b64(client.cert)}", client-key-data: "${b64(client.key)}"}`,
    'contexts:',
    '- name: peerload-cluster',
    `  context: {cluster: peerload-cluster, user: ${user}}`,
    'current-context: peerload-cluster',
    '',
  ].join('\n');
}
