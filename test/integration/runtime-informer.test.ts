/**
 * Informer against the real apiserver: list + watch into the cache, indexers, relist after 410 Gone (with
 * deletes that happened while disconnected), resync from the cache without requests, restart after errors.
 */
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { GVR, Informer, KubeClient, type RequestRecord } from '../../src/runtime/index.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import type { ConfigMap } from '../support/test-operator.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const core = kc.makeApiClient(k8s.CoreV1Api);
let ns: string;
const kube = new KubeClient(kc);
const requests: RequestRecord[] = [];
kube.onRequest((r) => requests.push(r));

beforeAll(async () => {
  ns = await createNamespace(kc, 'rt-inf');
});
afterAll(async () => {
  await kube.close();
  await core.deleteNamespace({ name: ns }).catch(() => undefined);
});

const cm = (name: string, labels: Record<string, string> = {}, data: Record<string, string> = {}) =>
  core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name, labels }, data } });

describe('informer', () => {
  it('lists (paginated), watches, indexes, relists on 410 and resyncs from the cache', async () => {
    for (let i = 0; i < 7; i++) await cm(`pre-${i}`, { svc: i % 2 ? 'odd' : 'even' });
    const inf = new Informer<ConfigMap>(kube.resource<ConfigMap>(GVR.configMaps), {
      namespace: ns,
      pageSize: 3,
      resyncPeriodMs: 0,
    });
    inf.addIndexer('svc', (o) => (o.metadata.labels?.svc ? [o.metadata.labels.svc] : []));
    const events: string[] = [];
    inf.addEventHandler({
      onAdd: (o) => events.push(`add ${o.metadata.name}`),
      onUpdate: (old, o) => events.push(`${old === o ? 'resync' : 'update'} ${o.metadata.name}`),
      onDelete: (o) => events.push(`delete ${o.metadata.name}`),
    });
    expect(inf.hasSynced()).toBe(false);
    inf.start();
    expect(await inf.waitForSync()).toBe(true);
    expect(inf.size).toBe(7);
    expect(requests.filter((r) => !r.watch && r.method === 'GET').length).toBe(3); // 3 pages
    expect(
      inf
        .byIndex('svc', 'odd')
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual(['pre-1', 'pre-3', 'pre-5']);
    expect(inf.get(`${ns}/pre-0`)?.metadata.managedFields).toBeUndefined();
    expect(inf.get(`${ns}/pre-0`)?.kind).toBe('ConfigMap');

    await cm('live', { svc: 'odd' });
    await waitFor('watch add', () => inf.get(`${ns}/live`));
    expect(inf.byIndex('svc', 'odd')).toHaveLength(4);
    await core.patchNamespacedConfigMap(
      { name: 'live', namespace: ns, body: { metadata: { labels: { svc: 'even' } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await waitFor('watch update', () => events.includes('update live'));
    expect(inf.byIndex('svc', 'odd')).toHaveLength(3);
    expect(inf.byIndex('svc', 'even')).toHaveLength(5);

    // Resync replays the cache and sends nothing to the apiserver.
    const n = requests.length;
    inf.resync();
    expect(events.filter((e) => e.startsWith('resync'))).toHaveLength(8);
    expect(requests.length).toBe(n);

    // Disconnect, delete an object meanwhile, and resume from a resourceVersion the apiserver no longer has:
    // the watch answers 410 Gone, the informer relists and reports the deletion it missed.
    await inf.stop();
    await core.deleteNamespacedConfigMap({ name: 'pre-0', namespace: ns });
    await cm('while-away');
    (inf as unknown as { resourceVersion: string }).resourceVersion = '1';
    const lists = requests.filter((r) => !r.watch && r.method === 'GET').length;
    inf.start();
    await waitFor('relist', () => events.includes('delete pre-0') && events.includes('add while-away'));
    expect(requests.filter((r) => !r.watch && r.method === 'GET').length).toBeGreaterThan(lists);
    expect(requests.some((r) => r.watch && r.query.resourceVersion === '1')).toBe(true);
    expect(inf.get(`${ns}/pre-0`)).toBeUndefined();
    expect(inf.byIndex('svc', 'even').map((o) => o.metadata.name)).not.toContain('pre-0');
    await inf.stop();
  });

  it('keeps retrying with backoff after a watch error and recovers', async () => {
    // Forbidden at first (an impersonated user without rights), the informer keeps trying; rights arrive later.
    const user = `rt-inf-${ns}`;
    const limited = new KubeClient(
      (() => {
        const c = kubeConfig(inject('kubeconfigPath'));
        c.users = c.users.map((u) => ({ ...u, impersonateUser: user }));
        return c;
      })(),
    );
    const seen: (RequestRecord & { at: number })[] = [];
    limited.onRequest((r) => seen.push({ ...r, at: Date.now() }));
    const inf = new Informer<ConfigMap>(limited.resource<ConfigMap>(GVR.configMaps), {
      namespace: ns,
      backoff: { initialMs: 100, maxMs: 400 },
    });
    inf.start();
    await waitFor('several forbidden attempts', () => seen.filter((r) => r.status === 403).length >= 4);
    expect(inf.hasSynced()).toBe(false);
    const rbac = kc.makeApiClient(k8s.RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: ns,
      body: {
        metadata: { name: 'cm-reader' },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'watch'] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: ns,
      body: {
        metadata: { name: 'cm-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'cm-reader' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: user }],
      },
    });
    expect(await inf.waitForSync(AbortSignal.timeout(15_000))).toBe(true);
    await cm('after-rbac');
    await waitFor('watch works', () => inf.get(`${ns}/after-rbac`));
    // Backoff: 100 ms doubling to 400 ms with +-20% jitter, so the gaps between failed attempts grow.
    const failed = seen.filter((r) => r.status === 403);
    const gaps = failed.slice(1).map((r, i) => r.at - failed[i]!.at);
    expect(gaps[0]).toBeGreaterThanOrEqual(75);
    expect(gaps[2]).toBeGreaterThan(gaps[0]!);
    await inf.stop();
    await limited.close();
  });
});
