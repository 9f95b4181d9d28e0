/**
 * The apiserver is stopped and started again (same etcd) under a running operator, on a control plane of
 * this file's own: changes made after the restart are reconciled without restarting the operator.
 */
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../support/controlplane.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { recordingController, sleep, type ReconcileRecord } from '../support/test-operator.ts';

let cp: ControlPlane;
let op: RunningManager;
let ns: string;
const records: ReconcileRecord[] = [];
const seen = (name: string, v: string) =>
  records.some((r) => r.phase === 'start' && r.key === `${ns}/${name}` && r.data?.v === v);

beforeAll(async () => {
  cp = await startControlPlane();
}, 180_000);

afterAll(async () => {
  await op?.stop();
  await cp?.stop();
});

describe('apiserver restart', () => {
  it('reconciles changes made after the apiserver came back, without restarting the operator', async () => {
    const kc = kubeConfig(cp.kubeconfigPath);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    ns = await createNamespace(kc, 'rt-restart');
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'before' }, data: { v: '1' } },
    });
    op = await startManager(
      kc,
      ['--namespace', ns, '--no-leader-elect'],
      [
        recordingController({
          identity: 'op',
          record: (r) => records.push(r),
          behavior: async () => undefined,
        }),
      ],
    );
    await waitFor('initial reconcile', () => seen('before', '1'));

    await cp.stopApiserver();
    await sleep(3000); // the watch breaks; the informer retries with backoff against a dead port
    await cp.startApiserver();
    expect(op.requests.some((r) => r.status === 0)).toBe(true); // the operator did notice the outage

    // Fresh clients: the old connections died with the apiserver.
    const core2 = kubeConfig(cp.kubeconfigPath).makeApiClient(k8s.CoreV1Api);
    await core2.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'after' }, data: { v: '1' } },
    });
    await core2.patchNamespacedConfigMap(
      { name: 'before', namespace: ns, body: { data: { v: '2' } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await waitFor('reconcile of a new object', () => seen('after', '1'), { timeoutMs: 60_000 });
    await waitFor('reconcile of an update', () => seen('before', '2'), { timeoutMs: 60_000 });
    const ready = await fetch(op.url('/readyz'));
    expect(ready.status).toBe(200);
    expect(op.manager.informers.all().every((i) => i.hasSynced())).toBe(true);
  });
});
