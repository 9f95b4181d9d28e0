/**
 * The ServedModel controller against the real apiserver, with EndpointSlices written by the test and
 * emulated model-server replicas.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import {
  startModelServerEmulator,
  startModelServerFleet,
  type ModelServerFleet,
} from '../support/modelserver-emulator.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { ServedModel } from '../../src/api/index.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';

let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let core: k8s.CoreV1Api;
let sms: PeerloadNamespace;
let ns = '';
let operator: RunningManager;
const cleanups: (() => Promise<unknown>)[] = [];
const dispatcher = loopbackDispatcher();

beforeAll(async () => {
  ({ kc, ns, custom, core, peerload: sms } = await testNamespace('sm'));
  operator = await startManager(
    kc,
    ['--no-leader-elect', '--poll-backoff-start', '100ms', '--poll-backoff-max', '1s'],
    [(ctx) => createServedModelController(ctx, { dispatcher, cleanupGraceMs: 3000 })],
  );
});

afterAll(async () => {
  await operator?.stop();
  for (const c of cleanups.reverse()) await c();
});

async function fleet(
  n: number,
  opts: Parameters<typeof startModelServerFleet>[1] = {},
): Promise<ModelServerFleet> {
  const f = await startModelServerFleet(n, opts);
  cleanups.push(() => f.close());
  return f;
}

const service = (name: string, urls: string[]) => ServiceEndpoints.of(kc, ns, name, urls);

async function create(name: string, spec: Record<string, unknown>): Promise<void> {
  await sms.createServedModel(name, spec);
}

const get = (name: string) => sms.getServedModel(name);

async function patchSpec(name: string, spec: Record<string, unknown>): Promise<void> {
  await sms.patchServedModel(name, { spec });
}

const cond = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

async function untilReady(name: string, ready: string, timeoutMs = 60_000): Promise<ServedModel> {
  return waitFor(
    `${name} Ready ${ready}`,
    async () => {
      const o = await get(name);
      return cond(o, 'Ready')?.status === 'True' &&
        o.status?.ready === ready &&
        o.status.observedGeneration === o.metadata.generation
        ? o
        : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  ).catch(async (err) => {
    const o = await get(name);
    throw new Error(`${(err as Error).message}; status: ${JSON.stringify(o.status)}`);
  });
}

async function events(name: string): Promise<string[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items.filter((e) => e.regarding?.name === name).map((e) => `${e.type}/${e.reason}`);
}

const spec = (service: string, extra: Record<string, unknown> = {}) => ({
  modelName: 'resnet-18',
  fileName: 'models/resnet-18.mar',
  modelServer: { service: { name: service, port: 'management' } },
  workers: { min: 2 },
  ...extra,
});

describe('ServedModel', () => {
  it('registers, scales and readies one model on 20 replicas, seed first; kubectl get shows 20/20', async () => {
    const f = await fleet(20, { registrationLatencyMs: 20, workerStartMs: 50 });
    await service('ts20', f.urls);
    await create('twenty', spec('ts20', { rollout: { maxConcurrent: 5, seedFirst: true } }));
    const ready = await untilReady('twenty', '20/20');
    expect(ready.status!.replicas).toHaveLength(20);
    expect(
      ready.status!.replicas!.every(
        (r) => r.registered && r.ready && r.readyWorkers >= 2 && r.pod && r.podUID,
      ),
    ).toBe(true);
    expect(ready.status!.servedVersion).toBe('1.0');
    for (const inst of f.instances) {
      expect(inst.model('resnet-18')[0]).toMatchObject({ minWorkers: 2, maxWorkers: 2 });
      expect(inst.stats.registrations).toBe(1);
    }
    expect(cond(ready, 'Degraded')?.status).toBe('False');
    expect(await events('twenty')).toEqual(
      expect.arrayContaining(['Normal/ModelRegistered', 'Normal/Ready']),
    );

    const table = (await custom.listNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: ns, plural: 'servedmodels' },
      k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io'),
    )) as { columnDefinitions: { name: string }[]; rows: { cells: unknown[] }[] };
    const row = table.rows.find((r) => r.cells[0] === 'twenty')!;
    const cell = (name: string) => row.cells[table.columnDefinitions.findIndex((c) => c.name === name)];
    expect([cell('Ready'), cell('Replicas'), cell('Reason')]).toEqual(['True', '20/20', 'AllReplicasReady']);
  });

  it('re-registers a restarted replica and follows the Service from 3 to 6 endpoints and back', async () => {
    const f = await fleet(6, { workerStartMs: 20 });
    const svc = await service('ts-scale', f.urls.slice(0, 3));
    await create('scale', spec('ts-scale', { workers: { min: 1 } }));
    await untilReady('scale', '3/3');

    // A pod restart: the process lost its models, the pod has a new UID.
    f.instances[1]!.wipe();
    const recreated = await svc.recreate('ts-scale-1');
    const back = await waitFor('restarted replica ready again', async () => {
      const o = await get('scale');
      const r = o.status?.replicas?.find((x) => x.pod === 'ts-scale-1');
      return r?.podUID === recreated.uid && r.ready && o.status?.ready === '3/3' ? o : undefined;
    });
    expect(back).toBeTruthy();
    expect(f.instances[1]!.stats.registrations).toBe(2);
    expect(await events('scale')).toContain('Normal/ReplicaRestarted');

    for (const [i, url] of f.urls.slice(3).entries()) await svc.add(`ts-scale-${i + 3}`, url);
    await untilReady('scale', '6/6');
    for (const i of [3, 4, 5]) await svc.remove(`ts-scale-${i}`);
    const shrunk = await untilReady('scale', '3/3');
    expect(shrunk.status!.replicas!.map((r) => r.pod).sort()).toEqual([
      'ts-scale-0',
      'ts-scale-1',
      'ts-scale-2',
    ]);
  });

  it('rolls out a new version with a default version at every moment, then removes the old one', async () => {
    const f = await fleet(3, {
      workerStartMs: 30,
      modelVersion: (file) => (file.includes('v2') ? '2.0' : '1.0'),
    });
    await service('ts-roll', f.urls);
    await create(
      'rollout',
      spec('ts-roll', { version: '1.0', fileName: 'models/resnet-v1.mar', workers: { min: 1 } }),
    );
    await untilReady('rollout', '3/3');

    let sawNoDefault = false;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const inst of f.instances) if (!inst.defaultVersion('resnet-18')) sawNoDefault = true;
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    await patchSpec('rollout', { version: '2.0', fileName: 'models/resnet-v2.mar' });
    const done = await waitFor('2.0 served everywhere', async () => {
      const o = await get('rollout');
      return o.status?.servedVersion === '2.0' &&
        o.status.ready === '3/3' &&
        o.status.observedGeneration === 2
        ? o
        : undefined;
    });
    await waitFor('old versions removed', () => f.instances.every((i) => i.model('resnet-18').length === 1));
    sampling = false;
    await sampler;
    expect(sawNoDefault).toBe(false);
    expect(done.status!.replicas!.every((r) => r.version === '2.0')).toBe(true);
    for (const inst of f.instances)
      expect(inst.model('resnet-18').map((m) => m.modelVersion)).toEqual(['2.0']);
  });

  it('an unreachable replica makes the resource Degraded, not stuck; delete unregisters everywhere and lets go', async () => {
    const f = await fleet(4, { workerStartMs: 20 });
    await service('ts-down', f.urls);
    await f.instances[3]!.inject({ mode: 'down' });
    await create('degraded', spec('ts-down', { workers: { min: 1 } }));
    const degraded = await waitFor('Degraded with 3/4 ready', async () => {
      const o = await get('degraded');
      return cond(o, 'Degraded')?.status === 'True' && o.status?.ready === '3/4' ? o : undefined;
    });
    expect(cond(degraded, 'Degraded')!.message).toMatch(
      /1 of 4 replica\(s\) failing: ts-down-3: .*ECONNREFUSED/,
    );
    expect(cond(degraded, 'Ready')!.status).toBe('False');
    // A dead replica is named as the reason and retried (Reconciling), not reported as plain progress.
    expect(cond(degraded, 'Ready')!.reason).toBe('ModelServerUnavailable');
    expect(cond(degraded, 'Reconciling')).toMatchObject({ status: 'True', reason: 'ModelServerUnavailable' });
    expect(cond(degraded, 'Stalled')).toBeUndefined();

    await f.instances[3]!.inject(undefined);
    await untilReady('degraded', '4/4');

    await sms.deleteServedModel('degraded');
    await waitFor('deleted', () => sms.servedModelGone('degraded'));
    for (const inst of f.instances) expect(inst.modelNames()).toEqual([]);
  });

  it('a Service that does not exist is Stalled/ServiceNotFound, and Ready once it appears', async () => {
    await create('no-service', spec('ts-later', { workers: { min: 1 } }));
    const stalled = await waitFor('Stalled', async () => {
      const o = await get('no-service');
      return cond(o, 'Stalled')?.status === 'True' ? o : undefined;
    });
    expect(cond(stalled, 'Stalled')).toMatchObject({ reason: 'ServiceNotFound', observedGeneration: 1 });
    expect(cond(stalled, 'Stalled')!.message).toContain('Service ts-later not found');
    expect(cond(stalled, 'Ready')).toMatchObject({ status: 'False', reason: 'ServiceNotFound' });
    const f = await fleet(1, { workerStartMs: 20 });
    await service('ts-later', f.urls);
    const ready = await untilReady('no-service', '1/1');
    expect(cond(ready, 'Stalled')).toBeUndefined();
    expect(cond(ready, 'Reconciling')).toBeUndefined();
  });

  it('deletion waits for a replica that is briefly away, and gives up on one that never answers', async () => {
    const f = await fleet(3, { workerStartMs: 20 });
    await service('ts-gone', f.urls);
    await create('gone', spec('ts-gone', { workers: { min: 1 } }));
    await untilReady('gone', '3/3');
    await f.instances[1]!.inject({ mode: 'down' });
    await f.instances[2]!.inject({ mode: 'down' });
    await sms.deleteServedModel('gone');
    await waitFor('reachable replica cleaned', () => f.instances[0]!.modelNames().length === 0);
    expect((await get('gone')).metadata.finalizers).toContain('peerload.io/unregister-model');
    await f.instances[1]!.inject(undefined); // back within the grace period: cleaned too
    await waitFor('deleted', () => sms.servedModelGone('gone'), { timeoutMs: 30_000 });
    expect(f.instances[1]!.modelNames()).toEqual([]);
    expect(f.instances[2]!.modelNames()).toEqual(['resnet-18']); // never answered: left behind, and said so
    expect(await events('gone')).toContain('Warning/CleanupAbandoned');
  });

  it('renews an expired management key with the API key (per-pod key files)', async () => {
    const inst = await startModelServerEmulator({ auth: true, workerStartMs: 20 });
    cleanups.push(() => inst.close());
    await service('ts-auth', [inst.url]);
    const secretName = 'ts-keys';
    const writeKeys = async () => {
      const body = { metadata: { name: secretName }, stringData: { 'ts-auth-0.json': inst.keyFile()! } };
      await core
        .replaceNamespacedSecret({ name: secretName, namespace: ns, body })
        .catch(() => core.createNamespacedSecret({ namespace: ns, body }));
    };
    await writeKeys();
    await create(
      'auth',
      spec('ts-auth', {
        workers: { min: 1 },
        modelServer: {
          service: { name: 'ts-auth' },
          managementTokenSecretRef: { name: secretName, key: '{pod}.json' },
        },
      }),
    );
    await untilReady('auth', '1/1');

    // The key expires; a sidecar publishes the pod's key file whenever it changes (here: the test).
    inst.expireManagementKey();
    let rotations = inst.stats.tokenRotations;
    let publishing = true;
    const sidecar = (async () => {
      while (publishing) {
        if (inst.stats.tokenRotations !== rotations) {
          rotations = inst.stats.tokenRotations;
          await writeKeys();
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await patchSpec('auth', { workers: { min: 2 } });
    const ready = await waitFor('2 workers with a renewed key', async () => {
      const o = await get('auth');
      return o.status?.replicas?.[0]?.readyWorkers === 2 && o.status.ready === '1/1' ? o : undefined;
    });
    publishing = false;
    await sidecar;
    expect(ready).toBeTruthy();
    expect(inst.stats.tokenRotations).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(ready)).not.toContain(inst.keys()!.management);
  });

  it('waits for a named ModelPreheat before registering (Preheated condition)', async () => {
    const f = await fleet(2, { workerStartMs: 20 });
    await service('ts-gate', f.urls);
    await create('gated', spec('ts-gate', { workers: { min: 1 }, preheat: { name: 'gate-preheat' } }));
    const waiting = await waitFor('waiting for preheat', async () => {
      const o = await get('gated');
      return cond(o, 'Preheated')?.reason === 'PreheatNotFound' ? o : undefined;
    });
    expect(cond(waiting, 'Ready')).toMatchObject({ status: 'False', reason: 'WaitingForPreheat' });
    expect(f.stats().registrationAttempts).toBe(0);

    // A ModelPreheat whose status says Succeeded (no manager needed for the gate itself).
    await sms.createModelPreheat('gate-preheat', {
      url: 'http://origin.invalid/m.mar',
      manager: { url: 'http://127.0.0.1:1' },
    });
    await sms.patchModelPreheatStatus('gate-preheat', {
      state: 'SUCCESS',
      conditions: [
        {
          type: 'Succeeded',
          status: 'True',
          reason: 'JobSucceeded',
          message: 'done',
          observedGeneration: 1,
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    });
    const ready = await untilReady('gated', '2/2');
    expect(cond(ready, 'Preheated')).toMatchObject({ status: 'True', reason: 'PreheatSucceeded' });
  });
});
