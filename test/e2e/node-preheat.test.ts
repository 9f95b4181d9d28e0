/**
 * Node-targeted preheat, scale-out warm-up and the cache lifecycle on the REAL Dragonfly network (manager and
 * scheduler v2.5.1, dfdaemon 1.4.2: a seed peer and three node peers on their own 127.0.0.x addresses), with MinIO
 * behind a counting proxy as the origin and emulated model-server replicas, each downloading through the peer of
 * "its node" (a Node object whose InternalIP is that peer's address, named by the EndpointSlice's nodeName):
 *   - a ServedModel with preheat.create preheats exactly its replicas' nodes (scope all_peers, ips); each replica
 *     downloads as soon as its node's job is created, through its node's peer, joining the task the preheat runs
 *     there (no node's daemon goes to the origin), and is Ready before the manager ends the job;
 *   - a pod scheduled on a new node (not ready yet) gets its node preheated at once, in a job naming that node
 *     alone (a node is never preheated twice for the same content), and is a local hit once ready;
 *   - status.cache lists the peers that hold the task (a get_task job), on demand;
 *   - evictOnDelete deletes the task from the network (a delete_task job): the next download goes to the origin.
 */
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { ProxyAgent, request } from 'undici';
import { waitFor } from '../support/kube.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import type { CountingProxy } from '../support/counting-proxy.ts';
import type { DragonflyPeerView, DragonflyView } from '../support/dragonfly.ts';
import type { MinIO } from '../support/minio.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import type { RunningManager } from '../support/runtime-harness.ts';
import { startRealNetworkBed, type RealNetworkBed } from '../support/real-network-bed.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { signObjectURL } from '../../src/storage/sign.ts';

const BUCKET = fileBucket('models');
const SM_KEY = 'nodes/tiny.mar';
const EVICT_KEY = 'nodes/evict.mar';

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let bed: RealNetworkBed;
let peerload: PeerloadNamespace;
let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let fleets: ModelServerFleet[] = [];
let svc: ServiceEndpoints;
let operator: RunningManager;
let size: number;
let jwt: string;
let tag: string;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('node-preheat'));

  bed = await startRealNetworkBed({
    prefix: 'node-preheat',
    bucket: BUCKET,
    network: await sharedDragonfly(inject('dragonflyService'), 3),
  });
  ({ network, minio, origin, tag } = bed);
  jwt = await network.signIn();
  // Larger than 4 MiB: dfdaemon 1.4 fetches smaller content straight from the origin, without the scheduler.
  size = await bed.putArchive('tiny', 6 << 20, [SM_KEY, EVICT_KEY]);

  // One emulated replica per node, each downloading through its own node's peer, with URLs signed at another
  // moment than the preheat's (the filter makes the task ids equal).
  const url = await bed.signedEarlier(SM_KEY);
  fleets = await Promise.all(
    network.peers.map((peer) =>
      startModelServerFleet(1, {
        proxyURL: peer.proxyURL,
        objectURL: () => url,
        // As the plugin: the tag the storage credentials give (the preheat's, signed with the same Secret).
        tag,
        workerStartMs: 50,
        modelVersion: '1.0',
      }),
    ),
  );
  for (const [i, peer] of network.peers.entries())
    await ServiceEndpoints.createNode(kc, `${ns}-node-${i}`, peer.ip);
  await bed.createSecrets(kc, ns);
  svc = new ServiceEndpoints(kc, ns, 'models');
  await svc.add('pod-0', fleets[0]!.urls[0]!, true, `${ns}-node-0`);
  await svc.add('pod-1', fleets[1]!.urls[0]!, true, `${ns}-node-1`);

  operator = await startRealNetworkOperator(kc, network.managerURL);
  await bed.network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await operator?.stop();
  for (const i of [0, 1, 2]) await core.deleteNode({ name: `${ns}-node-${i}` }).catch(() => undefined);
  await Promise.allSettled(fleets.map((f) => f.close()));
  await bed?.stop();
});

// A failure says which of the network's processes still run, and what the operator made of the objects.
afterEach(async ({ task }) => {
  if (task.result?.state !== 'fail') return;
  const objects = await Promise.all(
    (
      [
        ['servedmodels', 'tiny'],
        ['modelpreheats', 'tiny-preheat'],
      ] as const
    ).map(([plural, name]) =>
      peerload.get<{ status?: unknown }>(plural, name).then(
        (o) => `${plural}/${name}: ${JSON.stringify(o.status)}`,
        (err: Error) => `${plural}/${name}: ${err.message}`,
      ),
    ),
  );
  console.error(`${await network.report()}\n${objects.join('\n')}`);
});

const storageLocation = () => bed.objectStorage();
const manager = () => bed.manager();

/** The manager's own record of a job (its args as the manager stored them). */
async function managerJob(id: number): Promise<{ args: { ips?: string[] | null; scope?: string } }> {
  const res = await fetch(`${network.managerURL}/api/v1/jobs/${id}`, {
    headers: { authorization: `Bearer ${jwt}` },
  });
  return (await res.json()) as { args: { ips?: string[] | null; scope?: string } };
}

/** Downloads `url` through a peer's proxy as the plugin does; says whether it was a local hit. */
/** A GET through `peer` as the plugin makes it: with the tag the storage credentials give the task. */
async function download(peer: DragonflyPeerView, url: string): Promise<{ localHit: boolean; bytes: number }> {
  const agent = new ProxyAgent(peer.proxyURL);
  try {
    const headers = { 'X-Dragonfly-Use-P2P': 'true', 'X-Dragonfly-Tag': tag };
    const res = await request(url, { dispatcher: agent, headers });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { localHit: res.headers['x-dragonfly-task-download-finished'] === 'true', bytes: body.length };
  } finally {
    await agent.close();
  }
}

// Two threads that each wait for the real manager's job reads (30 s at least after a job's creation, a fixed delay
// in v2.5.1): the replicas' nodes, one test building on the last, and the eviction, with its own key and preheat on
// node 0's peer. They run side by side; within the first, the tests keep their order.
describe.concurrent('node-targeted preheat on the real network', () => {
  describe('the replicas’ nodes', { concurrent: true }, () => {
    it.sequential(
      'preheats the peers of the replicas’ nodes; each replica downloads as soon as its node’s job runs, a P2P hit',
      async () => {
        const created = Date.now();
        await peerload.createServedModel('tiny', {
          modelName: 'tiny',
          fileName: SM_KEY,
          modelServer: { service: { name: 'models' } },
          preheat: { create: true, objectStorage: storageLocation(), manager: manager() },
        });
        const sm = await peerload.untilReady('tiny', 2, { timeoutMs: 300_000, intervalMs: 250 });
        const readyAfterMs = Date.now() - created;
        const [p0, p1] = network.peers;
        // Ready before the manager ended the job (its first poll is 30 s after the create): the replicas' gates opened
        // when their nodes' job was created, and their downloads joined the task it runs on their nodes' peers.
        const running = await peerload.getModelPreheat('tiny-preheat');
        expect(running.status?.state, `Ready after ${readyAfterMs} ms`).not.toBe('SUCCESS');
        expect(sm.status!.replicas!.every((r) => r.message === undefined || !/waiting/.test(r.message))).toBe(
          true,
        );
        const preheat = await peerload.untilState('tiny-preheat', 'SUCCESS', {
          timeoutMs: 180_000,
          intervalMs: 1000,
        });
        expect(preheat.spec.scope).toBe('all_peers');
        expect(preheat.spec.targets?.ips).toEqual([p0!.ip, p1!.ip].sort());
        expect(preheat.status?.peers?.map((p) => [p.ip, p.state]).sort()).toEqual(
          [
            [p0!.ip, 'Preheated'],
            [p1!.ip, 'Preheated'],
          ].sort(),
        );
        expect((await managerJob(preheat.status!.jobID!)).args.ips?.sort()).toEqual([p0!.ip, p1!.ip].sort());
        // Each replica downloaded through its own node's peer, with the preheat's task id; on a miss, say whose.
        const taskID = preheat.status!.tasks![0]!.taskID;
        const seen = JSON.stringify({
          downloads: fleets.slice(0, 2).map((f) => f.instances[0]!.downloads),
          replicas: sm.status!.replicas,
          peers: preheat.status?.peers,
        });
        expect(sm.status!.replicas!.map((r) => r.nodeIP).sort(), seen).toEqual([p0!.ip, p1!.ip].sort());
        expect(
          fleets.slice(0, 2).flatMap((f) => f.instances[0]!.downloads.map((d) => d.taskID)),
          seen,
        ).toEqual([taskID, taskID]);
        // A P2P hit each: neither node's daemon went to the origin for the task (the seed peer did, once).
        for (const peer of [p0!, p1!])
          expect(
            (await peer.logs()).split('\n').filter((l) => l.includes(taskID) && l.includes('back to source')),
            peer.name,
          ).toEqual([]);
        // The origin served the object about once: the seed peer's fetch (plus the daemons' 1-byte probes); never more
        // than once per targeted peer.
        expect(origin.bytesServed(SM_KEY)).toBeGreaterThanOrEqual(size);
        expect(origin.bytesServed(SM_KEY)).toBeLessThan(3 * size);
      },
    );

    it.sequential(
      'warms up the node of a pod that is scheduled but not ready, in a job naming that node alone',
      async () => {
        const p2 = network.peers[2]!;
        const before = origin.bytesServed(SM_KEY);
        await svc.add('pod-2', fleets[2]!.urls[0]!, false, `${ns}-node-2`);
        const warmed = await waitFor(
          'node 2 preheated',
          async () => {
            const o = await peerload.getModelPreheat('tiny-preheat');
            return o.status?.peers?.find((p) => p.ip === p2.ip && p.state === 'Preheated') ? o : undefined;
          },
          { timeoutMs: 180_000, intervalMs: 1000 },
        );
        // The new job named node 2 only: nodes 0 and 1 hold the content already.
        expect((await managerJob(warmed!.status!.jobID!)).args.ips).toEqual([p2.ip]);
        // No replica of it yet: the pod is not ready.
        expect((await peerload.getServedModel('tiny')).status?.ready).toBe('2/2');

        await svc.setReady('pod-2', true);
        const sm = await peerload.untilReady('tiny', 3, { timeoutMs: 120_000, intervalMs: 1000 });
        expect(sm!.status!.replicas!.find((r) => r.nodeIP === p2.ip)?.localHit).toBe(true);
        // Node 2's peer got the model from the other peers, not from the origin.
        expect(origin.bytesServed(SM_KEY) - before).toBeLessThan(size);
      },
    );

    it.sequential('status.cache lists the peers that hold the task, on demand', async () => {
      await peerload.patchModelPreheat('tiny-preheat', {
        metadata: { annotations: { 'peerload.io/refresh-cache': 'now' } },
      });
      const preheat = await waitFor(
        'cache observed',
        async () => {
          const o = await peerload.getModelPreheat('tiny-preheat');
          return o.status?.cache?.observedAt && o.status.cache.requested === 'now' ? o : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 1000 },
      );
      const task = preheat!.status!.cache!.tasks[0]!;
      expect(task.taskID).toBe(preheat!.status!.tasks![0]!.taskID);
      const holders = task.peers.filter((p) => p.finished).map((p) => p.ip);
      for (const peer of network.peers) expect(holders).toContain(peer.ip);
      expect(task.peerCount).toBeGreaterThanOrEqual(3);
      // The ServedModel shows the same.
      await waitFor(
        'ServedModel cache',
        async () => (await peerload.getServedModel('tiny')).status?.cache?.observedAt,
        {
          timeoutMs: 30_000,
        },
      );
    });
  });

  it('evictOnDelete deletes the task from the network: the next download goes to the origin', async () => {
    const p0 = network.peers[0]!;
    await peerload.createModelPreheat('evict', {
      type: 'file',
      objectStorage: { ...storageLocation(), keys: [EVICT_KEY] },
      scope: 'all_peers',
      targets: { ips: [p0.ip] },
      evictOnDelete: true,
      manager: manager(),
    });
    await waitFor(
      'evict preheated',
      async () => (await peerload.getModelPreheat('evict')).status?.state === 'SUCCESS',
      { timeoutMs: 180_000, intervalMs: 1000 },
    );
    const location = { ...minio.location(BUCKET), endpoint: origin.url };
    const { url } = await signObjectURL(location, EVICT_KEY, minio.credentials(), { expiresSeconds: 600 });
    expect((await download(p0, url)).localHit).toBe(true);

    await peerload.deleteModelPreheat('evict');
    await waitFor('evict gone', () => peerload.modelPreheatGone('evict'), {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    const events = await core.listNamespacedEvent({
      namespace: ns,
      fieldSelector: 'involvedObject.name=evict',
    });
    expect(events.items.map((e) => e.reason)).toContain('TasksEvicted');
    const before = origin.bytesServed(EVICT_KEY);
    const after = await download(p0, url);
    expect(after).toEqual({ localHit: false, bytes: size });
    expect(origin.bytesServed(EVICT_KEY) - before).toBeGreaterThanOrEqual(size);
  });
});
