/**
 * /metrics over HTTPS with authentication and authorization (--metrics-secure, the default): the runtime runs as
 * deploy/base's ServiceAccount with deploy/base's RBAC (impersonation), so the TokenReview and SubjectAccessReview
 * it makes are the ones the operator's roles must allow. No token: 401; a token the apiserver does not know:
 * 401; a ServiceAccount token without `get /metrics`: 403; one bound to peerload-operator-metrics-reader: 200 with the
 * metrics. The probes stay open over HTTPS; plain HTTP is refused. A certificate from --metrics-cert-dir is
 * served, and a rotated one is served without a restart.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KubeClient, selfSignedCertificate, type KubeObject } from '../../src/runtime/index.ts';
import { createNamespace, impersonating, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { applyInto } from '../support/example-apply.ts';
import { gvrOf, kustomize } from '../support/runtime-deploy.ts';
import { serviceAccountIdentity } from '../support/service-account.ts';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const admin = new KubeClient(kc);
const SA_NS = 'peerload-system';
const asOperator = () =>
  impersonating(kubeconfigPath, `system:serviceaccount:${SA_NS}:peerload-operator`, [
    'system:serviceaccounts',
    `system:serviceaccounts:${SA_NS}`,
    'system:authenticated',
  ]);
const base = kustomize(join(REPO_ROOT, 'deploy/base'));
const CRB = gvrOf({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding' });
const rbacKinds = ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding'];

let ns: string;
let readerToken: string;
let otherToken: string;
const agents: Agent[] = [];

/** GET over HTTPS, trusting only the certificate the manager serves. */
async function get(op: RunningManager, path: string, token?: string, ca = op.manager.health.certificate) {
  const agent = new Agent({ connect: { ca } });
  agents.push(agent);
  const res = await fetch(op.url(path), {
    dispatcher: agent,
    headers: token ? { authorization: `Bearer ${token}` } : {},
  });
  return { status: res.status, body: await res.text(), headers: res.headers };
}

const reviews = (op: RunningManager) =>
  op.requests
    .filter((r) => r.method === 'POST' && /(tokenreviews|subjectaccessreviews)$/.test(r.path))
    .map((r) => `${r.path.split('/').pop()} ${r.status}`);

beforeAll(async () => {
  await applyInto(
    admin,
    base.filter((m) => rbacKinds.includes(m.kind)),
    undefined,
  );
  ns = await createNamespace(kc, 'metrics-auth');
  readerToken = (await serviceAccountIdentity(kubeconfigPath, ns, 'prometheus')).token;
  otherToken = (await serviceAccountIdentity(kubeconfigPath, ns, 'someone')).token;
  await admin.resource(CRB).create({
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: `${ns}-metrics-reader` },
    roleRef: {
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'ClusterRole',
      name: 'peerload-operator-metrics-reader',
    },
    subjects: [{ kind: 'ServiceAccount', name: 'prometheus', namespace: ns }],
  } as KubeObject);
});

afterAll(async () => {
  await admin
    .resource(CRB)
    .delete(undefined, `${ns}-metrics-reader`)
    .catch(() => undefined);
  await admin.close();
  await Promise.all(agents.map((a) => a.close()));
});

describe('/metrics with --metrics-secure', () => {
  it('answers 401 without a valid token, 403 without the permission, 200 with it; probes stay open', async () => {
    const op = await startManager(asOperator(), ['--metrics-secure', '--no-leader-elect'], []);
    try {
      expect(op.url('/metrics')).toMatch(/^https:/);
      // The self-signed certificate names the loopback address the test connects to.
      const none = await get(op, '/metrics');
      expect(none.status).toBe(401);
      expect(none.headers.get('www-authenticate')).toBe('Bearer');
      expect(none.body).not.toMatch(/controller_runtime|process_cpu/);
      expect((await get(op, '/metrics', 'not-a-token')).status).toBe(401);

      const denied = await get(op, '/metrics', otherToken);
      expect(denied.status).toBe(403);
      expect(denied.body).toBe(`Authorization denied for user system:serviceaccount:${ns}:someone\n`);
      expect(denied.body).not.toContain(otherToken);

      const allowed = await get(op, '/metrics', readerToken);
      expect(allowed.status).toBe(200);
      expect(allowed.body).toMatch(
        /^rest_client_requests_total\{code="201",host="[^"]+",method="POST"\} \d+/m,
      );
      expect(allowed.body).toMatch(/^process_cpu_seconds_total /m);

      // Every review was made under the operator's ServiceAccount and allowed by deploy/base's roles.
      // (None for the request without a token.)
      expect(reviews(op)).toEqual([
        'tokenreviews 201',
        'tokenreviews 201',
        'subjectaccessreviews 201',
        'tokenreviews 201',
        'subjectaccessreviews 201',
      ]);
      // Cached: scraping again asks the apiserver nothing (client-go's delegating cache TTLs).
      for (let i = 0; i < 3; i++) expect((await get(op, '/metrics', readerToken)).status).toBe(200);
      expect((await get(op, '/metrics', otherToken)).status).toBe(403);
      expect(reviews(op)).toHaveLength(5);

      // The kubelet probes without a token.
      expect((await get(op, '/healthz')).status).toBe(200);
      await waitFor('ready', async () => (await get(op, '/readyz')).status === 200);
      // Only HTTPS on the port.
      await expect(fetch(op.url('/healthz').replace('https:', 'http:'))).rejects.toThrow();
    } finally {
      expect(await op.stop()).toBe(0);
    }
  });

  it('serves the certificate of --metrics-cert-dir and a rotated one without a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'peerload-metrics-cert-'));
    const first = selfSignedCertificate(['metrics.example', '127.0.0.1']);
    const write = (p: { cert: string; key: string }) => {
      writeFileSync(join(dir, 'tls.key'), p.key);
      writeFileSync(join(dir, 'tls.crt'), p.cert);
    };
    write(first);
    const op = await startManager(
      asOperator(),
      ['--metrics-secure', '--metrics-cert-dir', dir, '--no-leader-elect'],
      [],
    );
    try {
      expect(op.manager.health.certificate).toBe(first.cert);
      expect((await get(op, '/metrics', readerToken, first.cert)).status).toBe(200);
      const second = selfSignedCertificate(['metrics.example', '127.0.0.1']);
      write(second);
      // Re-read every 10 s; a client trusting only the new certificate connects once it is served.
      await waitFor(
        'the rotated certificate served',
        async () =>
          (await get(op, '/healthz', undefined, second.cert).catch(() => ({ status: 0 }))).status === 200,
        { timeoutMs: 25_000, intervalMs: 500 },
      );
      await expect(get(op, '/healthz', undefined, first.cert)).rejects.toThrow();
    } finally {
      expect(await op.stop()).toBe(0);
    }
  });

  it('refuses a certificate directory without a matching key, naming the flag and the file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'peerload-metrics-cert-'));
    writeFileSync(join(dir, 'tls.crt'), selfSignedCertificate(['a']).cert);
    writeFileSync(join(dir, 'tls.key'), selfSignedCertificate(['a']).key);
    await expect(
      startManager(asOperator(), ['--metrics-secure', '--metrics-cert-dir', dir, '--no-leader-elect'], []),
    ).rejects.toThrow(
      `--metrics-cert-dir: ${join(dir, 'tls.key')} is not the key of ${join(dir, 'tls.crt')}`,
    );
  });
});
