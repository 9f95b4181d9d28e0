/**
 * Scenario 2: one ServedModel on 100 emulated replicas (EndpointSlices of a Service; registration takes a fixed
 * 200 ms, workers READY 300 ms after scaling) vs the ideal schedule of the rollout settings:
 *   seed registration (200 ms), then ceil(99 / maxConcurrent) waves of 200 ms, then 300 ms until the last
 *   replica's worker is READY.
 * The HTTP round trips themselves (describe, scale) and the status writes are the operator's overhead.
 */
import { createServedModelController } from '../../src/controllers/index.ts';
import type { KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import {
  GVR,
  benchClient,
  deleteServedModelAndWait,
  isReady,
  newNamespace,
  watchObjects,
} from '../lib/kube.ts';
import { progress, stat, until, within, type Row } from '../lib/report.ts';

const REPLICAS = 100;
const REGISTRATION_MS = 200;
const WORKER_START_MS = 300;

export interface S2Options {
  reps: number;
  maxConcurrent?: number[];
}

export const idealMs = (replicas: number, maxConcurrent: number) =>
  REGISTRATION_MS + Math.ceil((replicas - 1) / maxConcurrent) * REGISTRATION_MS + WORKER_START_MS;

export async function scenario2(cp: ControlPlane, o: S2Options): Promise<{ rows: Row[]; raw: unknown }> {
  const settings = o.maxConcurrent ?? [10, 25];
  const kube = benchClient(cp);
  const fleet = await startModelServerFleet(REPLICAS, {
    registrationLatencyMs: REGISTRATION_MS,
    workerStartMs: WORKER_START_MS,
  });
  const ns = await newNamespace(kube, 'bench2');
  const kc = kubeConfig(cp.kubeconfigPath);
  const svc = new ServiceEndpoints(kc, ns, 'torchserve');
  for (const [i, url] of fleet.urls.entries()) await svc.add(`ts-${i}`, url);
  const operator = await startManager(
    kc,
    // One namespace is the whole cluster here: every registration slot is its own (by default a quarter is kept
    // back for other namespaces, one more wave at maxConcurrent 25).
    [
      '--no-leader-elect',
      '--namespace',
      ns,
      '--poll-backoff-start',
      '100ms',
      '--poll-backoff-max',
      '2s',
      '--max-registrations-per-namespace',
      '32',
    ],
    [(ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher(), cleanupGraceMs: 5_000 })],
  );
  const results: Record<number, { ms: number[]; statusWrites: number[]; passes: number[] }> = {};
  const ready = new Map<string, number>();
  let warmupMs = NaN;
  const watch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
    if (!ready.has(obj.metadata.name) && isReady(obj)) ready.set(obj.metadata.name, at);
  });
  try {
    await within('operator informers synced', 30_000, operator.manager.informers.waitForSync());
    await watch.ready;
    // Warm-up (not measured): right after the informers start, the apiserver's watch cache for a fresh CRD may
    // hold the first events for ~2 s (a watch from the list's resourceVersion waits until the cache is fresh).
    {
      const name = 'warmup';
      const t0 = performance.now();
      await kube.resource(GVR.servedModels).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ServedModel',
        metadata: { name, namespace: ns },
        spec: {
          modelName: name,
          fileName: 'models/warmup.mar',
          modelServer: { service: { name: 'torchserve' } },
        },
      } as unknown as KubeObject);
      await until('warm-up Ready', 120_000, () => ready.has(name));
      warmupMs = ready.get(name)! - t0;
      progress(`s2 warm-up rollout (maxConcurrent 10, not measured): ${warmupMs.toFixed(0)} ms`);
      await deleteServedModelAndWait(kube, ns, name);
    }
    for (let rep = 0; rep < o.reps; rep++) {
      for (const mc of rep % 2 === 0 ? settings : [...settings].reverse()) {
        for (const e of fleet.instances) e.wipe();
        const name = `fanout-${mc}-${rep}`;
        const before = operator.requests.length;
        const t0 = performance.now();
        await kube.resource(GVR.servedModels).create({
          apiVersion: 'peerload.io/v1alpha1',
          kind: 'ServedModel',
          metadata: { name, namespace: ns },
          spec: {
            modelName: name,
            fileName: `models/${name}.mar`,
            modelServer: { service: { name: 'torchserve' } },
            workers: { min: 1 },
            rollout: { maxConcurrent: mc, seedFirst: true },
          },
        } as unknown as KubeObject);
        await until(`${name} Ready`, 120_000, () => ready.has(name));
        const ms = ready.get(name)! - t0;
        const writes = operator.requests
          .slice(before)
          .filter((r) => r.method === 'PATCH' && r.path.endsWith(`/servedmodels/${name}/status`)).length;
        const registrations = fleet.instances.filter((e) => e.modelNames().includes(name)).length;
        (results[mc] ??= { ms: [], statusWrites: [], passes: [] }).ms.push(ms);
        results[mc].statusWrites.push(writes);
        progress(
          `s2 rep ${rep + 1} maxConcurrent ${mc}: ${ms.toFixed(0)} ms (ideal ${idealMs(REPLICAS, mc)} ms), ${writes} status writes, registered on ${registrations}`,
        );
        await deleteServedModelAndWait(kube, ns, name);
      }
    }
  } finally {
    watch.stop();
    await operator.stop();
    await fleet.close();
    await kube.close();
  }
  const rows: Row[] = settings.map((mc, i) => {
    const ideal = idealMs(REPLICAS, mc);
    const r = results[mc]!;
    const ratio = stat(r.ms.map((m) => m / ideal));
    return {
      id: `2${'abcdef'[i]}`,
      scenario: `1 ServedModel on 100 emulated replicas, maxConcurrent ${mc}`,
      metric: 'create → Ready (all 100 READY), seen by a watch',
      unit: 's',
      value: stat(r.ms.map((m) => m / 1000)),
      reference: stat([ideal / 1000]),
      referenceLabel: `(ideal: 200 + ceil(99/${mc})×200 + 300 ms)`,
      ratio,
      target: '≤ 1.5× ideal',
      pass: ratio.median <= 1.5,
      notes: `maxConcurrent ${mc}: ideal ${ideal} ms; status writes per rollout ${stat(r.statusWrites).median}; poll-backoff-start 100ms; warm-up rollout right after operator start (not measured): ${(warmupMs / 1000).toFixed(2)} s`,
    };
  });
  return {
    rows,
    raw: {
      warmupMs,
      replicas: REPLICAS,
      registrationMs: REGISTRATION_MS,
      workerStartMs: WORKER_START_MS,
      results,
    },
  };
}
