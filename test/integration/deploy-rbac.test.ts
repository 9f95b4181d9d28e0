/**
 * The RBAC of deploy/base is exactly what the operator needs. The rendered ServiceAccount, ClusterRole, Role
 * and bindings are applied to the real apiserver, then the operator runs in-process as that ServiceAccount
 * (impersonation) while every request is recorded:
 * 1. the runtime with an exerciser controller doing each kind of operation the product controllers do:
 *    every request is allowed, and every (resource, verb) the roles grant is used by a request, granted by
 *    exactly one rule -- so removing any rule, or any verb of one, makes a recorded request fail;
 * 2. the product controllers (src/controllers) on a ModelPreheat and a ServedModel: nothing is refused.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { controllers } from '../../src/controllers/index.ts';
import { GVR } from '../../src/api/index.ts';
import {
  Controller,
  EventRecorder,
  KubeClient,
  addFinalizer,
  removeFinalizer,
  type ControllerFactory,
  type KubeObject,
  type RequestRecord,
} from '../../src/runtime/index.ts';
import { createNamespace, createSecret, impersonating, kubeConfig, waitFor } from '../support/kube.ts';
import { applyInto } from '../support/example-apply.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { rbacOf, startManager } from '../support/runtime-harness.ts';
import { kustomize, type Manifest } from '../support/runtime-deploy.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { serviceAccountIdentity } from '../support/service-account.ts';
import { Agent, fetch } from 'undici';
import { join } from 'node:path';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const admin = new KubeClient(kc);
const SA_NS = 'peerload-system';
const SA = `system:serviceaccount:${SA_NS}:peerload-operator`;
const asOperator = () =>
  impersonating(kubeconfigPath, SA, [
    'system:serviceaccounts',
    `system:serviceaccounts:${SA_NS}`,
    'system:authenticated',
  ]);
const base = kustomize(join(REPO_ROOT, 'deploy/base'));
const rbacKinds = ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding'];
let ns: string;

type MP = KubeObject & Pick<ModelPreheat, 'spec' | 'status'>;
type SM = KubeObject & Pick<ServedModel, 'spec' | 'status'>;

beforeAll(async () => {
  await applyInto(
    admin,
    base.filter((m) => rbacKinds.includes(m.kind)),
    undefined,
  );
  await admin
    .resource(GVR.leases)
    .delete(SA_NS, 'peerload-operator')
    .catch(() => undefined);
  ns = await createNamespace(kc, 'rbac');
  await createSecret(kc, ns, 'token', { token: 'not-a-real-token' });
});

afterAll(async () => {
  await admin.close();
});

/** (group|resource|verb) -> number of rules granting it. */
function granted(): Map<string, number> {
  const out = new Map<string, number>();
  for (const role of base.filter((m) => m.kind === 'ClusterRole' || m.kind === 'Role') as (Manifest & {
    rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
  })[]) {
    // The operator's roles; not the metrics reader role (nonResourceURLs), which is granted to scrapers.
    for (const r of role.rules.filter((r) => r.resources))
      for (const g of r.apiGroups)
        for (const res of r.resources)
          for (const v of r.verbs) out.set(`${g}|${res}|${v}`, (out.get(`${g}|${res}|${v}`) ?? 0) + 1);
  }
  return out;
}

const used = (requests: RequestRecord[]) =>
  new Set(
    requests
      .filter((r) => r.status !== 401 && r.status !== 403 && r.status !== 0)
      .map((r) => {
        const x = rbacOf(r);
        return `${x.group}|${x.resource}|${x.verb}`;
      }),
  );

const refused = (requests: RequestRecord[]) =>
  requests
    .filter((r) => r.status === 401 || r.status === 403)
    .map((r) => `${r.method} ${r.path} -> ${r.status}`);

/** Does, as the operator, each kind of operation the product controllers do (not their logic). */
const exerciser =
  (done: Set<string>): ControllerFactory =>
  (ctx) => {
    const mps = ctx.informers.get<MP>(GVR.modelPreheats);
    const sms = ctx.informers.get<SM>(GVR.servedModels);
    const slices = ctx.informers.get(GVR.endpointSlices, { labelSelector: 'kubernetes.io/service-name' });
    const events = new EventRecorder(ctx.kube, {
      controller: 'peerload.io/test',
      instance: 'x',
      seriesIntervalMs: 0,
    });
    const F = 'peerload.io/test';
    return new Controller<MP>(
      {
        name: 'rbac-exerciser',
        for: mps,
        watches: [
          { informer: sms, map: (o) => [`${o.metadata.namespace}/${o.metadata.name}`] },
          { informer: slices, map: () => [] },
        ],
        reconcile: async (key) => {
          const mp = mps.get(key);
          const sm = sms.get(key);
          if (!mp || !sm || mp.metadata.labels?.child || done.has(key)) return;
          const { namespace, name } = mp.metadata;
          await ctx.kube.resource(GVR.secrets).get(namespace, 'token');
          // Node-targeted preheat reads a node's addresses (a missing node is a 404, not a refusal).
          await ctx.kube
            .resource(GVR.nodes)
            .get(undefined, 'no-such-node')
            .catch(() => undefined);
          // Manager resolution reads a ClusterManager (a missing one is a 404) and its namespace's labels.
          await ctx.kube
            .resource(GVR.clusterManagers)
            .get(undefined, 'no-such-clustermanager')
            .catch(() => undefined);
          await ctx.kube.resource(GVR.namespaces).get(undefined, namespace!);
          // finalizer (patch) makes the cached copy stale: the status write conflicts (409) and re-reads (get).
          const withF = await addFinalizer(ctx.kube, GVR.modelPreheats, mp, F);
          await ctx.status.update(GVR.modelPreheats, mp, (o) => ({ ...o.status, attempts: 1 }));
          await removeFinalizer(
            ctx.kube,
            GVR.modelPreheats,
            await ctx.kube.resource<MP>(GVR.modelPreheats).get(namespace, name),
            F,
          );
          expect(withF.metadata.finalizers).toContain(F);
          const smF = await addFinalizer(ctx.kube, GVR.servedModels, sm, F);
          await ctx.status.update(GVR.servedModels, sm, (o) => ({ ...o.status, readyReplicas: 0 }));
          await removeFinalizer(
            ctx.kube,
            GVR.servedModels,
            await ctx.kube.resource<SM>(GVR.servedModels).get(namespace, name),
            F,
          );
          expect(smF.metadata.finalizers).toContain(F);
          // The ServedModel controller creates and updates its ModelPreheat.
          const child = await ctx.kube.resource<MP>(GVR.modelPreheats).create({
            apiVersion: 'peerload.io/v1alpha1',
            kind: 'ModelPreheat',
            metadata: { name: `${name}-child`, namespace, labels: { child: 'yes' } },
            spec: { url: 'https://models.example.com/a.bin' } as MP['spec'],
          });
          await ctx.kube
            .resource<MP>(GVR.modelPreheats)
            .update({ ...child, spec: { ...child.spec, tag: 't2' } });
          events.record(mp, 'Warning', 'JobFailed', 'exercising');
          events.record(mp, 'Warning', 'JobFailed', 'exercising'); // series: patch
          await events.flush();
          done.add(key);
        },
      },
      { logger: ctx.logger, metrics: ctx.metrics },
    );
  };

const leaderFlags = [
  '--leader-election-namespace',
  SA_NS,
  '--lease-duration',
  '4s',
  '--renew-deadline',
  '3s',
  '--retry-period',
  '1s',
];

describe('operator RBAC (deploy/base) under the ServiceAccount', () => {
  it('allows every request the runtime makes, and every granted verb is used', async () => {
    const done = new Set<string>();
    // --metrics-secure: a scrape makes the operator review the scraper's token and access (create reviews).
    const op = await startManager(asOperator(), [...leaderFlags, '--metrics-secure'], [exerciser(done)]);
    try {
      await admin.resource<MP>(GVR.modelPreheats).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ModelPreheat',
        metadata: { name: 'm', namespace: ns },
        spec: { url: 'https://models.example.com/m.bin' } as MP['spec'],
      });
      await admin.resource<SM>(GVR.servedModels).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ServedModel',
        metadata: { name: 'm', namespace: ns },
        spec: {
          modelName: 'm',
          fileName: 'm.mar',
          modelServer: { endpoints: ['http://127.0.0.1:9'] },
        } as SM['spec'],
      });
      await waitFor('exerciser done', () => done.has(`${ns}/m`), { timeoutMs: 30_000 });
      const scraper = await serviceAccountIdentity(kubeconfigPath, ns, 'scraper');
      const tls = new Agent({ connect: { ca: op.manager.health.certificate } });
      try {
        const res = await fetch(op.url('/metrics'), {
          dispatcher: tls,
          headers: { authorization: `Bearer ${scraper.token}` },
        });
        expect(res.status).toBe(403); // reviewed: the scraper is not bound to the metrics reader role
      } finally {
        await tls.close();
      }
    } finally {
      expect(await op.stop()).toBe(0); // releases the lease: an update
    }
    expect(refused(op.requests)).toEqual([]);
    expect(op.requests.some((r) => r.status === 409)).toBe(true); // the conflict path ran, under RBAC
    const g = granted();
    const u = used(op.requests);
    const unused = [...g.keys()].filter((k) => !u.has(k));
    expect(unused).toEqual([]);
    expect([...u].filter((k) => !g.has(k))).toEqual([]);
    expect([...g].filter(([, n]) => n > 1)).toEqual([]); // one rule per permission: removing any one breaks a request
  });

  let manager: ManagerEmulator | undefined;
  let peer: PeerProxy | undefined;
  afterAll(async () => {
    await Promise.all([manager?.close(), peer?.close()]);
  });

  it('refuses nothing the product controllers do', async () => {
    peer = await startPeerProxy();
    manager = await startManagerEmulator({ peer });
    const op = await startManager(
      asOperator(),
      [
        ...leaderFlags,
        '--manager-url',
        manager.url,
        '--poll-backoff-start',
        '200ms',
        '--poll-backoff-max',
        '1s',
      ],
      controllers,
    );
    try {
      await admin.resource<MP>(GVR.modelPreheats).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ModelPreheat',
        metadata: { name: 'product', namespace: ns },
        spec: { url: `${manager.url}/nothing-here.bin` } as MP['spec'],
      });
      await admin.resource<SM>(GVR.servedModels).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ServedModel',
        metadata: { name: 'product', namespace: ns },
        spec: {
          modelName: 'product',
          fileName: 'product.mar',
          modelServer: { endpoints: ['http://127.0.0.1:9'] },
        } as SM['spec'],
      });
      await waitFor(
        'both reconciled (status written)',
        async () => {
          const a = await admin.resource<MP>(GVR.modelPreheats).get(ns, 'product');
          const b = await admin.resource<SM>(GVR.servedModels).get(ns, 'product');
          return a.status?.conditions?.length && b.status?.conditions?.length;
        },
        { timeoutMs: 60_000 },
      );
      await admin.resource(GVR.modelPreheats).delete(ns, 'product');
      await admin.resource(GVR.servedModels).delete(ns, 'product');
      await waitFor(
        'finalizers released',
        async () => {
          const left = await admin.resource(GVR.modelPreheats).list(ns);
          return !left.items.some((i) => i.metadata.name === 'product');
        },
        { timeoutMs: 60_000 },
      );
    } finally {
      expect(await op.stop()).toBe(0);
    }
    // Only this test's namespace and cluster-wide requests count: the operator also sees what earlier test files
    // left in namespaces being deleted, where the apiserver refuses every create with 403 (NamespaceLifecycle,
    // not RBAC).
    const own = op.requests.filter(
      (r) => !r.path.includes('/namespaces/') || r.path.includes(`/namespaces/${ns}/`),
    );
    expect(refused(own)).toEqual([]);
    expect(
      op.requests.filter((r) => r.method === 'PATCH' && r.path.endsWith('/status')).length,
    ).toBeGreaterThan(0);
  });
});
