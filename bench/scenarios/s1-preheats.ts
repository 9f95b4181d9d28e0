/**
 * Scenario 1: 1,000 ModelPreheats created at once against the manager emulator (jobs succeed at once) on the real
 * apiserver, vs the apiserver's ceiling: a plain client creating the same 1,000 objects and merge-patching each
 * `/status` to SUCCESS, as fast as it can, with the same concurrency as the operator's workers.
 */
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import type { KubeClient, KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startManagerEmulator } from '../../test/support/manager-emulator.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import { GVR, benchClient, countWrites, deleteAll, newNamespace, watchObjects } from '../lib/kube.ts';
import { mapLimit, percentile, progress, stat, within, type Row } from '../lib/report.ts';

const N = 1000;
const API = 'peerload.io/v1alpha1';

export interface S1Options {
  reps: number;
  workers: number;
  pollBackoffStart: string;
}

const body = (name: string) => ({
  apiVersion: API,
  kind: 'ModelPreheat',
  metadata: { name },
  spec: { url: `http://127.0.0.1:9/models/${name}.mar` },
});

/** The status the operator ends with, as a plain client would write it in one merge patch. */
function successStatus(obj: KubeObject, managerURL: string): Record<string, unknown> {
  const now = new Date().toISOString();
  const gen = obj.metadata.generation ?? 1;
  return {
    observedGeneration: gen,
    state: 'SUCCESS',
    jobID: 1,
    groupID: 'group_00000000-0000-0000-0000-000000000000',
    managerURL,
    jobGeneration: gen,
    attempts: 1,
    startedAt: now,
    completedAt: now,
    tasks: [{ url: (obj['spec'] as { url: string }).url, taskID: '0'.repeat(64) }],
    successCount: 1,
    failureCount: 0,
    successTasks: [{ url: (obj['spec'] as { url: string }).url, hostname: 'seed-peer-0', ip: '127.0.0.1' }],
    failureTasks: [],
    conditions: [
      {
        type: 'Succeeded',
        status: 'True',
        observedGeneration: gen,
        lastTransitionTime: now.replace(/\.\d+Z$/, 'Z'),
        reason: 'JobSucceeded',
        message: 'preheat job 1 succeeded on 1 peer(s)',
      },
    ],
  };
}

async function reference(
  kube: KubeClient,
  workers: number,
  managerURL: string,
): Promise<{ create: number; patch: number }> {
  const ns = await newNamespace(kube, 'bench1-ref');
  const mph = kube.resource(GVR.modelPreheats);
  const names = Array.from({ length: N }, (_, i) => `m-${i}`);
  const t0 = performance.now();
  const created = await mapLimit(names, workers, (name) =>
    mph.create({ ...body(name), metadata: { name, namespace: ns } } as unknown as KubeObject),
  );
  const t1 = performance.now();
  await mapLimit(created, workers, (obj) =>
    mph.patchStatus(ns, obj.metadata.name, {
      metadata: { resourceVersion: obj.metadata.resourceVersion },
      status: successStatus(obj, managerURL),
    }),
  );
  const t2 = performance.now();
  await deleteAll(kube, GVR.modelPreheats, ns);
  return { create: t1 - t0, patch: t2 - t1 };
}

interface OpRun {
  totalMs: number;
  latencies: number[];
  writesPerObject: number;
  eventsPerObject: number;
  byVerb: Record<string, number>;
  managerRequests: number;
}

/**
 * `live`: the operator runs, then the bench creates the 1,000 objects at once (the scenario; latencies).
 * `precreated`: the objects exist first, then the operator starts: time from start to all Succeeded, comparable
 * with the 1,000 /status patches alone (creation excluded on both sides).
 */
async function operatorRun(
  cp: ControlPlane,
  kube: KubeClient,
  o: S1Options,
  mode: 'live' | 'precreated',
  noEvents = false,
): Promise<OpRun> {
  const manager = await startManagerEmulator({ jobLatencyMs: 0 });
  const ns = await newNamespace(kube, `bench1-${mode}`);
  const kc = kubeConfig(cp.kubeconfigPath);
  const mph = kube.resource(GVR.modelPreheats);
  const names = Array.from({ length: N }, (_, i) => `m-${i}`);
  const created = new Map<string, number>();
  if (mode === 'precreated') {
    await mapLimit(names, o.workers, (name) =>
      mph.create({ ...body(name), metadata: { name, namespace: ns } } as unknown as KubeObject),
    );
  }
  const succeeded = new Map<string, number>();
  let allDone: () => void = () => undefined;
  const done = new Promise<void>((r) => (allDone = r));
  const watch = watchObjects<KubeObject>(kube, GVR.modelPreheats, ns, (_type, obj, at) => {
    const name = obj.metadata.name;
    const st = obj['status'] as { conditions?: { type: string; status: string }[] } | undefined;
    if (!succeeded.has(name) && st?.conditions?.some((c) => c.type === 'Succeeded' && c.status === 'True')) {
      succeeded.set(name, at);
      if (succeeded.size === N) allDone();
    }
  });
  await watch.ready;
  const tStart = performance.now();
  const operator = await startManager(
    kc,
    [
      '--no-leader-elect',
      '--namespace',
      ns,
      '--workers',
      String(o.workers),
      // One namespace is the whole cluster here, as for the plain client it is measured against.
      '--max-workers-per-namespace',
      String(o.workers),
      '--manager-url',
      manager.url,
      '--poll-backoff-start',
      o.pollBackoffStart,
      '--poll-backoff-max',
      '2s',
    ],
    [
      noEvents
        ? (ctx) => {
            // Experiment only: what the Events cost (the recorder is shared; this instance is ours).
            ctx.events.record = () => undefined;
            return modelPreheatController(ctx);
          }
        : modelPreheatController,
    ],
  );
  await within('operator informers synced', 30_000, operator.manager.informers.waitForSync());
  let t0 = tStart;
  if (mode === 'live') {
    t0 = performance.now();
    await mapLimit(names, o.workers, async (name) => {
      await mph.create({ ...body(name), metadata: { name, namespace: ns } } as unknown as KubeObject);
      created.set(name, performance.now());
    });
  } else for (const n of names) created.set(n, tStart);
  try {
    await within(`${N} ModelPreheats Succeeded`, 300_000, done);
  } catch (err) {
    watch.stop();
    await operator.stop();
    await manager.close();
    throw err;
  }
  const t1 = Math.max(...succeeded.values());
  watch.stop();
  // Let late writes (events in flight) land before counting.
  await operator.manager.events.flush();
  await operator.stop();
  const w = countWrites(operator.requests, 'modelpreheats');
  const managerRequests = manager.counters.requests;
  await manager.close();
  await deleteAll(kube, GVR.modelPreheats, ns);
  return {
    totalMs: t1 - t0,
    latencies: names.map((n) => succeeded.get(n)! - created.get(n)!),
    writesPerObject: w.resource / N,
    eventsPerObject: w.events / N,
    byVerb: w.byVerb,
    managerRequests,
  };
}

export async function scenario1(cp: ControlPlane, o: S1Options): Promise<{ rows: Row[]; raw: unknown }> {
  const kube = benchClient(cp);
  const refs: { create: number; patch: number }[] = [];
  const ops: OpRun[] = [];
  const pres: OpRun[] = [];
  const quiet: OpRun[] = [];
  try {
    for (let rep = 0; rep < o.reps; rep++) {
      // Alternate the order so neither side always runs on a warmer apiserver.
      const refFirst = rep % 2 === 0;
      if (refFirst) refs.push(await reference(kube, o.workers, 'http://127.0.0.1:9'));
      pres.push(await operatorRun(cp, kube, o, 'precreated'));
      ops.push(await operatorRun(cp, kube, o, 'live'));
      quiet.push(await operatorRun(cp, kube, o, 'precreated', true));
      if (!refFirst) refs.push(await reference(kube, o.workers, 'http://127.0.0.1:9'));
      const r = refs.at(-1)!;
      const op = ops.at(-1)!;
      const pre = pres.at(-1)!;
      progress(
        `s1 rep ${rep + 1}: operator pre-created ${pre.totalMs.toFixed(0)} ms, live ${op.totalMs.toFixed(0)} ms, pre-created without Events ${quiet.at(-1)!.totalMs.toFixed(0)} ms; reference create ${r.create.toFixed(0)} + patch ${r.patch.toFixed(0)} ms; writes/object ${op.writesPerObject}, events/object ${op.eventsPerObject}`,
      );
    }
  } finally {
    await kube.close();
  }
  const refTotal = refs.map((r) => r.create + r.patch);
  const opTotal = ops.map((r) => r.totalMs / 1000);
  const scenario = `1,000 ModelPreheats (workers ${o.workers}, poll-backoff-start ${o.pollBackoffStart})`;
  const ratio = stat(ops.map((r, i) => r.totalMs / refTotal[i]!));
  const ratioPre = stat(pres.map((r, i) => r.totalMs / refs[i]!.patch));
  const p50 = ops.map((r) => percentile(r.latencies, 50) / 1000);
  const p99 = ops.map((r) => percentile(r.latencies, 99) / 1000);
  const writes = stat([...pres, ...ops].map((r) => r.writesPerObject));
  const rows: Row[] = [
    {
      id: '1a',
      scenario,
      metric: '1,000 pre-created: operator start → all Succeeded (seen by a watch)',
      unit: 's',
      value: stat(pres.map((r) => r.totalMs / 1000)),
      reference: stat(refs.map((r) => r.patch / 1000)),
      referenceLabel: '(plain client: 1,000 /status merge-patches)',
      ratio: ratioPre,
      target: '≤ 2× the ceiling',
      pass: ratioPre.median <= 2,
      notes:
        `operator writes per object: ${stat(pres.map((r) => r.writesPerObject)).median} status, ` +
        `${stat(pres.map((r) => r.eventsPerObject)).median} events (the ceiling: 1 status write); ` +
        `experiment (Event recorder disabled in-process): ${stat(quiet.map((r) => r.totalMs / 1000)).median.toFixed(2)} s = ` +
        `${stat(quiet.map((r, i) => r.totalMs / refs[i]!.patch)).median.toFixed(2)}× the ceiling`,
    },
    {
      id: '1b',
      scenario,
      metric: 'created at once (operator running): first create → all Succeeded',
      unit: 's',
      value: stat(opTotal),
      reference: stat(refTotal.map((t) => t / 1000)),
      referenceLabel: '(plain client: 1,000 creates + 1,000 /status merge-patches)',
      ratio,
      target: '≤ 2× the ceiling (same end state)',
      pass: ratio.median <= 2,
      notes:
        `ceiling split: creates ${stat(refs.map((r) => r.create / 1000)).median.toFixed(2)} s + patches ` +
        `${stat(refs.map((r) => r.patch / 1000)).median.toFixed(2)} s; ratio vs the patches alone ` +
        `${stat(ops.map((r, i) => r.totalMs / refs[i]!.patch)).median.toFixed(2)}×`,
    },
    {
      id: '1c',
      scenario,
      metric: 'create→Succeeded latency p50 (created at once)',
      unit: 's',
      value: stat(p50),
      target: 'reported',
    },
    {
      id: '1d',
      scenario,
      metric: 'create→Succeeded latency p99 (created at once)',
      unit: 's',
      value: stat(p99),
      target: 'reported',
    },
    {
      id: '1e',
      scenario,
      metric: 'operator writes per ModelPreheat (modelpreheats + /status)',
      unit: '',
      value: writes,
      target: '≤ 3',
      pass: writes.max <= 3,
      notes: `events written per ModelPreheat (separate): ${stat(ops.map((r) => r.eventsPerObject)).median}; by verb: ${JSON.stringify(ops.at(-1)?.byVerb)}`,
    },
  ];
  return {
    rows,
    raw: {
      reference: refs,
      precreated: pres.map((r) => ({ ...r, latencies: undefined })),
      precreatedWithoutEvents: quiet.map((r) => ({ ...r, latencies: undefined })),
      operator: ops.map((r) => ({
        ...r,
        latencies: undefined,
        p50: percentile(r.latencies, 50),
        p99: percentile(r.latencies, 99),
      })),
    },
  };
}
