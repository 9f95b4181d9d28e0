import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { inClusterConfig, kubeconfigFromFile, loadKubeConfig } from '../../src/runtime/kubeconfig.ts';

const dir = mkdtempSync(join(tmpdir(), 'peerload-kc-'));
const write = (name: string, text: string) => {
  writeFileSync(join(dir, name), text);
  return join(dir, name);
};

describe('kubeconfig loading', () => {
  it('reads server, CA, token file (re-read on each use), client cert and impersonation', async () => {
    const tokenFile = write('token', 'first\n');
    const path = write(
      'config',
      [
        'apiVersion: v1',
        'current-context: b',
        'clusters:',
        '- {name: c1, cluster: {server: "https://a:6443", certificate-authority-data: "Q0E="}}',
        '- {name: c2, cluster: {server: "https://b:6443", certificate-authority: ca.crt, tls-server-name: api}}',
        'users:',
        '- {name: u2, user: {tokenFile: token, client-certificate: c.crt, client-key-data: "S0VZ", as: bob, as-groups: [g1]}}',
        'contexts:',
        '- {name: a, context: {cluster: c1, user: u2}}',
        '- {name: b, context: {cluster: c2, user: u2}}',
      ].join('\n'),
    );
    const kc = kubeconfigFromFile(path)!;
    expect(kc.getCurrentCluster()).toMatchObject({
      server: 'https://b:6443',
      caFile: join(dir, 'ca.crt'),
      tlsServerName: 'api',
    });
    expect(kc.getCurrentUser()).toMatchObject({
      certFile: join(dir, 'c.crt'),
      keyData: 'S0VZ',
      impersonateUser: 'bob',
      impersonateGroups: ['g1'],
    });
    const h1: { headers?: Record<string, string> } = {};
    await kc.applyToHTTPSOptions(h1);
    expect(h1.headers).toEqual({ Authorization: 'Bearer first', 'Impersonate-User': 'bob' });
    writeFileSync(tokenFile, 'rotated');
    const h2: { headers?: Record<string, string> } = {};
    await kc.applyToHTTPSOptions(h2);
    expect(h2.headers?.Authorization).toBe('Bearer rotated');
  });

  it('hands auth plugins to client-node', async () => {
    const path = write(
      'exec',
      [
        'current-context: x',
        'clusters: [{name: c, cluster: {server: "https://x"}}]',
        'users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}}]',
        'contexts: [{name: x, context: {cluster: c, user: u}}]',
      ].join('\n'),
    );
    expect(kubeconfigFromFile(path)).toBeUndefined();
    const kc = await loadKubeConfig(path, {});
    expect(kc.getCurrentCluster()?.server).toBe('https://x');
    expect(kc.constructor.name).toBe('KubeConfig');
  });

  it('builds the in-cluster config from the service environment', async () => {
    const kc = inClusterConfig({ KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' });
    expect(kc.getCurrentCluster()).toMatchObject({
      server: 'https://10.0.0.1:443',
      caFile: '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt',
    });
    expect(kc.getCurrentUser()?.tokenFile).toBe('/var/run/secrets/kubernetes.io/serviceaccount/token');
    expect(
      (await loadKubeConfig(undefined, { KUBERNETES_SERVICE_HOST: 'fd00::1' })).getCurrentCluster()?.server,
    ).toBe('https://[fd00::1]:443');
    await expect(loadKubeConfig(undefined, { HOME: dir, KUBECONFIG: join(dir, 'missing') })).rejects.toThrow(
      /no kubeconfig/,
    );
  });
});
