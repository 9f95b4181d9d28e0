/**
 * A ServiceAccount's identity on the test control plane, as a pod gets it: a bound token from the TokenRequest
 * API and the cluster CA, written either as the in-cluster files (token, ca.crt, namespace) or as a kubeconfig.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { KubeClient } from '../../src/runtime/index.ts';
import { kubeConfig } from './kube.ts';

export interface ServiceAccountIdentity {
  namespace: string;
  name: string;
  token: string;
  /** PEM of the CA that signed the apiserver's serving certificate. */
  caPEM: string;
  server: URL;
}

/** Creates the ServiceAccount when missing and requests a token for it (1 h). */
export async function serviceAccountIdentity(
  kubeconfigPath: string,
  namespace: string,
  name: string,
): Promise<ServiceAccountIdentity> {
  const kube = new KubeClient(kubeConfig(kubeconfigPath));
  try {
    await kube
      .request('POST', `/api/v1/namespaces/${namespace}/serviceaccounts`, {
        body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } },
      })
      .catch((err: { code?: number }) => {
        if (err.code !== 409) throw err;
      });
    const tr = await kube.request<{ status: { token: string } }>(
      'POST',
      `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`,
      {
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: { expirationSeconds: 3600 },
        },
      },
    );
    const raw = load(readFileSync(kubeconfigPath, 'utf8')) as {
      clusters: { cluster: { server: string; 'certificate-authority-data'?: string } }[];
    };
    const cluster = raw.clusters[0]!.cluster;
    const caPEM = Buffer.from(cluster['certificate-authority-data'] ?? '', 'base64').toString('utf8');
    if (!caPEM.includes('BEGIN CERTIFICATE')) throw new Error('the test kubeconfig carries no CA data');
    return { namespace, name, token: tr.status.token, caPEM, server: new URL(cluster.server) };
  } finally {
    await kube.close();
  }
}

/** The files a pod finds in /var/run/secrets/kubernetes.io/serviceaccount. */
export function writeServiceAccountDir(dir: string, id: ServiceAccountIdentity): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'token'), id.token, { mode: 0o644 });
  writeFileSync(join(dir, 'ca.crt'), id.caPEM);
  writeFileSync(join(dir, 'namespace'), id.namespace);
}

/** A kubeconfig that authenticates as the ServiceAccount. */
export function writeServiceAccountKubeconfig(path: string, id: ServiceAccountIdentity): void {
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'sa',
    clusters: [
      {
        name: 'test',
        cluster: {
          server: id.server.origin,
          'certificate-authority-data': Buffer.from(id.caPEM).toString('base64'),
        },
      },
    ],
    users: [{ name: id.name, user: { token: id.token } }],
    contexts: [{ name: 'sa', context: { cluster: 'test', user: id.name, namespace: id.namespace } }],
  };
  writeFileSync(path, JSON.stringify(kubeconfig), { mode: 0o600 });
}
