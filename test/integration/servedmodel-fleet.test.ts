/**
 * Node targeting past the manager's bound of 100 IPs per job (real kube-apiserver, the manager emulator in its
 * v2.5.1 profile: JWT, 10 job creations per second per scheduler cluster, 429 text/plain past it): a ServedModel
 * on 130 nodes owns two ModelPreheats (100 and 30 nodes), each one job; every node is targeted exactly once; a
 * node scheduled later joins the batch with room in one job of its own; the manager's rate limit (lowered to one
 * creation per second here, so the two batches meet it) is waited out without a Warning Event or a failed status.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createSecret } from '../support/kube.ts';
import {
  archiveServedModel,
  emulatedManagerPreheat,
  type PeerloadNamespace,
  testNamespace,
} from '../support/resources.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';

const NODES = 130;

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let peerload: PeerloadNamespace;
let manager: ManagerEmulator;
let fleet: ModelServerFleet;
let svc: ServiceEndpoints;
let operator: RunningManager;
const nodeNames: string[] = [];
const ipOf = (i: number) => `10.77.${Math.floor(i / 200)}.${(i % 200) + 1}`;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('smfleet'));
  manager = await startManagerEmulator({
    version: 'v2.5.1',
    jobRateLimit: 1,
    jobLatencyMs: 300,
    runningStates: true,
    nodePeers: Array.from({ length: NODES + 1 }, (_, i) => ({ ip: ipOf(i), hostname: `peer-${i}` })),
  });
  fleet = await startModelServerFleet(NODES + 1, { workerStartMs: 10 });
  svc = new ServiceEndpoints(kc, ns, 'fleet');
  for (let i = 0; i <= NODES; i++) {
    nodeNames.push(`${ns}-n${i}`);
    await ServiceEndpoints.createNode(kc, nodeNames[i]!, ipOf(i));
  }
  for (let i = 0; i < NODES; i++) await svc.add(`pod-${i}`, fleet.urls[i]!, true, nodeNames[i]);
  await createSecret(kc, ns, 's3', { access_key: 'AKIAEXAMPLE', secret_key: 'secret-example' });
  await createSecret(kc, ns, 'manager-user', { username: 'root', password: 'dragonfly' });
  operator = await startManager(
    kc,
    [...soloOperatorFlags(), '--allowed-manager-hosts', '127.0.0.1'],
    [
      modelPreheatController,
      (ctx) =>
        createServedModelController(ctx, { dispatcher: loopbackDispatcher(), targetBatchWindowMs: 300 }),
    ],
  );
}, 120_000);

afterAll(async () => {
  await operator?.stop();
  for (const name of nodeNames) await core.deleteNode({ name }).catch(() => undefined);
  await Promise.allSettled([fleet?.close(), manager?.close()]);
});

async function preheats(): Promise<ModelPreheat[]> {
  return (await peerload.listModelPreheats()).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
}

const preheatJobs = () =>
  [...manager.jobs.values()]
    .filter((j) => j.type === 'preheat')
    .map((j) => (j.args['ips'] as string[]) ?? []);

/** The ServedModel once its status counts `n` nodes holding the model (the jobs end after the replicas are Ready). */
function untilPreheated(n: number): Promise<ServedModel> {
  return peerload.untilServedModel(
    'fleet',
    `${n} nodes preheated in status`,
    (sm) => sm.status?.nodePreheat?.preheated === n,
    { timeoutMs: 60_000 },
  );
}

const untilReady = (ready: number) => peerload.untilReady('fleet', ready, { timeoutMs: 90_000 });

describe('node targeting on more than 100 nodes', () => {
  it('splits the nodes into owned ModelPreheats of at most 100, one job each; the rate limit is no failure', async () => {
    await peerload.createServedModel(
      'fleet',
      archiveServedModel('fleet', 'fleet', {
        rollout: { maxConcurrent: 50 },
        preheat: emulatedManagerPreheat(manager.url),
      }),
    );
    const ready = await untilReady(NODES);
    // Ready without waiting for the jobs' end: each replica's gate opened once its node's job was created.
    expect(ready.status!.nodePreheat!.nodes).toBe(NODES);
    const sm = await untilPreheated(NODES);

    const [first, second, ...more] = await preheats();
    expect(more).toHaveLength(0);
    expect(first!.metadata.name).toBe('fleet-preheat');
    expect(second!.metadata.name).toBe('fleet-preheat-1');
    const a = first!.spec.targets!.ips!;
    const b = second!.spec.targets!.ips!;
    expect([a.length, b.length]).toEqual([100, 30]);
    // Every node in exactly one batch.
    expect(new Set([...a, ...b])).toEqual(new Set(Array.from({ length: NODES }, (_, i) => ipOf(i))));
    // One job per batch: 2 jobs for 130 nodes (⌈130 / 100⌉), however often the manager said 429.
    const jobs = preheatJobs();
    expect(jobs.map((ips) => ips.length).sort((x, y) => x - y)).toEqual([30, 100]);
    const limited = manager.log.filter((r) => r.method === 'POST' && r.status === 429).length;
    expect(limited).toBeGreaterThan(0);
    // Status in counts; neither object reported the 429 as a failure.
    expect(sm.status!.nodePreheat).toEqual({
      batches: 2,
      nodes: NODES,
      preheated: NODES,
      fetching: 0,
      failed: 0,
    });
    expect(sm.status!.preheatName).toBe('fleet-preheat');
    const events = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
    expect(events.items.filter((e) => e.type === 'Warning').map((e) => `${e.reason}: ${e.note}`)).toEqual([]);
    for (const p of [first!, second!]) expect(p.status!.attempts).toBe(1);
  });

  it('a node scheduled later joins the batch with room, in one job naming it alone', async () => {
    await svc.add(`pod-${NODES}`, fleet.urls[NODES]!, true, nodeNames[NODES]);
    await untilReady(NODES + 1);
    const sm = await untilPreheated(NODES + 1);
    const [first, second, ...more] = await preheats();
    expect(more).toHaveLength(0);
    expect(first!.spec.targets!.ips).toHaveLength(100);
    expect(second!.spec.targets!.ips).toHaveLength(31);
    expect(second!.spec.targets!.ips).toContain(ipOf(NODES));
    const jobs = preheatJobs();
    expect(jobs).toHaveLength(3);
    expect(jobs).toContainEqual([ipOf(NODES)]);
    expect(sm.status!.nodePreheat).toMatchObject({ batches: 2, nodes: NODES + 1, preheated: NODES + 1 });
  });
});
