/**
 * Status writer, conditions, events and finalizers against the real apiserver, through a test controller over
 * ModelPreheat objects (not the product controller). Requests are counted in the kube client.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat } from '../../src/api/index.ts';
import { GVR } from '../../src/api/index.ts';
import {
  Controller,
  EventRecorder,
  addFinalizer,
  getCondition,
  removeFinalizer,
  setCondition,
  type Informer,
  type KubeObject,
} from '../../src/runtime/index.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { rbacOf, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { sleep } from '../support/test-operator.ts';

type MP = KubeObject & Pick<ModelPreheat, 'spec' | 'status'>;

const kc = kubeConfig(inject('kubeconfigPath'));
let ns: string;
let op: RunningManager;
let informer: Informer<MP>;
const reconciles: string[] = [];

const mps = () => op.kube.resource<MP>(GVR.modelPreheats);
const statusPatches = (name: string) =>
  op.requests.filter((r) => r.method === 'PATCH' && r.path.endsWith(`/modelpreheats/${name}/status`));
const read = (name: string) => mps().get(ns, name);
const annotate = (name: string, annotations: Record<string, string>) =>
  mps().patch(ns, name, { metadata: { annotations } });

beforeAll(async () => {
  ns = await createNamespace(kc, 'rt-status');
  op = await startManager(
    kc,
    ['--namespace', ns, '--no-leader-elect'],
    [
      (ctx) => {
        informer = ctx.informers.get<MP>(GVR.modelPreheats);
        return new Controller<MP>(
          {
            name: 'test-status',
            for: informer,
            reconcile: async (key) => {
              reconciles.push(key);
              const obj = informer.get(key);
              if (!obj) return;
              await ctx.status.update(GVR.modelPreheats, obj, (o) => {
                const a = o.metadata.annotations ?? {};
                const ok = a['test/state'] === 'True';
                return {
                  ...o.status,
                  state: ok ? 'SUCCESS' : 'PENDING',
                  conditions: setCondition(
                    o.status?.conditions,
                    {
                      type: 'Succeeded',
                      status: ok ? 'True' : 'False',
                      reason: ok ? 'JobSucceeded' : 'JobPending',
                      message: a['test/message'] ?? '',
                    },
                    o.metadata.generation,
                  ),
                };
              });
            },
          },
          { logger: ctx.logger, metrics: ctx.metrics },
        );
      },
    ],
  );
  await waitFor('ready', async () => (await fetch(op.url('/readyz'))).status === 200);
});

afterAll(async () => {
  expect(await op?.stop()).toBe(0);
});

const create = (name: string) =>
  mps().create({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: { name, namespace: ns },
    spec: { url: 'https://models.example.com/a.bin' } as MP['spec'],
  });

describe('status writer', () => {
  it('writes status once, leaves generation alone, and follows the condition conventions', async () => {
    await create('a');
    const got = await waitFor('status', async () => {
      const o = await read('a');
      return getCondition(o.status?.conditions, 'Succeeded') ? o : undefined;
    });
    expect(got.metadata.generation).toBe(1);
    const c = getCondition(got.status?.conditions, 'Succeeded')!;
    expect(c).toMatchObject({ status: 'False', reason: 'JobPending', observedGeneration: 1, message: '' });
    expect(c.lastTransitionTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(got.status?.state).toBe('PENDING');
    // The operator records a request once it has read the response: our GET may see the write first.
    await waitFor('the write recorded', () => statusPatches('a').length >= 1);
    await sleep(200);
    expect(statusPatches('a')).toHaveLength(1);
    // Only status was sent: no spec, nothing else.
    expect(op.requests.filter((r) => r.path.includes('/modelpreheats/a') && r.method !== 'GET')).toHaveLength(
      1,
    );
  });

  it('sends no request when the status is unchanged (new events, resync)', async () => {
    const before = reconciles.length;
    await annotate('a', { poke: '1' }); // an update event, nothing the status depends on
    await waitFor('reconcile after poke', () => reconciles.length > before);
    const writesBefore = op.requests.filter((r) => !r.watch && r.method !== 'GET').length;
    const r2 = reconciles.length;
    informer.resync();
    await waitFor('reconcile after resync', () => reconciles.length > r2);
    await sleep(300);
    expect(statusPatches('a')).toHaveLength(1);
    expect(op.requests.filter((r) => !r.watch && r.method !== 'GET').length).toBe(writesBefore);
    // Resync replays the cache: no list or get went to the apiserver.
    expect(op.requests.filter((r) => !r.watch && rbacOf(r).verb === 'list').length).toBe(1);
  });

  it('moves lastTransitionTime only when the status value changes; generation stays', async () => {
    const t0 = getCondition((await read('a')).status?.conditions, 'Succeeded')!.lastTransitionTime;
    await sleep(1100);
    await annotate('a', { 'test/message': 'waiting for seed peers' });
    const c1 = await waitFor('message', async () => {
      const c = getCondition((await read('a')).status?.conditions, 'Succeeded');
      return c?.message === 'waiting for seed peers' ? c : undefined;
    });
    expect(c1.lastTransitionTime).toBe(t0);
    expect(c1.status).toBe('False');
    await annotate('a', { 'test/state': 'True' });
    const o2 = await waitFor('True', async () => {
      const o = await read('a');
      return getCondition(o.status?.conditions, 'Succeeded')?.status === 'True' ? o : undefined;
    });
    const c2 = getCondition(o2.status?.conditions, 'Succeeded')!;
    expect(c2.lastTransitionTime).not.toBe(t0);
    expect(c2.reason).toBe('JobSucceeded');
    expect(o2.metadata.generation).toBe(1);
    expect(o2.status?.state).toBe('SUCCESS');
    await waitFor('the writes recorded', () => statusPatches('a').length >= 3);
    await sleep(200);
    expect(statusPatches('a')).toHaveLength(3);
  });

  it('records observedGeneration of a new spec', async () => {
    await mps().patch(ns, 'a', { spec: { url: 'https://models.example.com/b.bin' } });
    const o = await waitFor('observedGeneration 2', async () => {
      const x = await read('a');
      return getCondition(x.status?.conditions, 'Succeeded')?.observedGeneration === 2 ? x : undefined;
    });
    expect(o.metadata.generation).toBe(2);
  });

  it('re-reads and retries on a 409 conflict', async () => {
    const stale = await read('a');
    await mps().patchStatus(ns, 'a', { status: { jobID: 7 } }); // someone else moves resourceVersion
    const gets = op.requests.filter((r) => r.method === 'GET' && r.path.endsWith('/modelpreheats/a')).length;
    const res = await op.manager.status.update(GVR.modelPreheats, stale, (o) => ({
      ...o.status,
      attempts: 2,
    }));
    expect(res.written).toBe(true);
    expect(res.object.status).toMatchObject({ jobID: 7, attempts: 2 }); // computed from the fresh object
    const conflicts = op.requests.filter(
      (r) => r.status === 409 && r.path.endsWith('/modelpreheats/a/status'),
    );
    expect(conflicts.length).toBeGreaterThanOrEqual(1);
    expect(op.requests.filter((r) => r.method === 'GET' && r.path.endsWith('/modelpreheats/a')).length).toBe(
      gets + 1,
    );
  });
});

describe('events and finalizers', () => {
  it('de-duplicates repeated events client side and counts them as a series', async () => {
    const obj = await read('a');
    const rec = new EventRecorder(op.kube, {
      controller: 'peerload.io/test',
      instance: 't',
      seriesIntervalMs: 200,
    });
    const posts = () => op.requests.filter((r) => r.method === 'POST' && r.path.includes('/events')).length;
    const p0 = posts();
    for (let i = 0; i < 50; i++) rec.record(obj, 'Warning', 'JobFailed', 'manager unreachable');
    await rec.flush();
    expect(posts() - p0).toBe(1);
    await sleep(250);
    rec.record(obj, 'Warning', 'JobFailed', 'manager unreachable'); // 51st: past the series interval
    rec.record(obj, 'Normal', 'JobCreated', 'job 7 created'); // a different event
    await rec.flush();
    expect(posts() - p0).toBe(2);
    const list = await op.kube.resource(GVR.events).list(ns);
    const failed = list.items.filter((e) => e.reason === 'JobFailed');
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({
      type: 'Warning',
      regarding: { kind: 'ModelPreheat', name: 'a', namespace: ns },
      series: { count: 51 },
    });
    expect(() => rec.record(obj, 'Normal', 'not camel', 'x')).toThrow(/CamelCase/);
  });

  it('adds and removes finalizers, writing only when needed', async () => {
    const f = 'peerload.io/cleanup';
    const obj = await read('a');
    const withF = await addFinalizer(op.kube, GVR.modelPreheats, obj, f);
    expect(withF.metadata.finalizers).toEqual([f]);
    const n = op.requests.length;
    expect(await addFinalizer(op.kube, GVR.modelPreheats, withF, f)).toBe(withF);
    expect(op.requests.length).toBe(n);
    const without = await removeFinalizer(op.kube, GVR.modelPreheats, withF, f);
    expect(without.metadata.finalizers ?? []).toEqual([]);
    expect(without.metadata.generation).toBe(withF.metadata.generation);
  });
});
