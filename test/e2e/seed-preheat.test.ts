/**
 * A ServedModel without node targeting on the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon 1.4.2:
 * a seed peer and two node peers on their own 127.0.0.x addresses), MinIO behind a counting proxy as the origin:
 * static endpoints (no Node to target) and `preheat.create` with scope `single_seed_peer`. The replicas register
 * as soon as the owned preheat's job is underway, not when the manager reports its SUCCESS (its next state sync,
 * about 30 s later): each download through its node's peer joins the task the job runs on the seed peer, and the
 * origin serves the object once. The reference t1 is the same machinery without a preheat: one replica, one cold
 * download through one node peer (node peer → seed peer → origin), on an object of the same size.
 */
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { createNamespace, kubeConfig } from '../support/kube.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import { startRealNetworkBed, type RealNetworkBed } from '../support/real-network-bed.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { peerloadNamespace, type PeerloadNamespace } from '../support/resources.ts';
import type { RunningManager } from '../support/runtime-harness.ts';

const BUCKET = fileBucket('models');
const KEY = 'seed/model.mar';
const T1_KEY = 'seed/t1.mar';
const SIZE = 64 << 20;

let bed: RealNetworkBed;
let peerload: PeerloadNamespace;
let fleet: ModelServerFleet;
let operator: RunningManager;
let size: number;

beforeAll(async () => {
  const kc = kubeConfig(inject('kubeconfigPath'));
  const ns = await createNamespace(kc, 'seed-preheat');
  peerload = peerloadNamespace(kc, ns);
  bed = await startRealNetworkBed({
    prefix: 'seed-preheat',
    bucket: BUCKET,
    network: await sharedDragonfly(inject('dragonflyService'), 2),
  });
  size = await bed.putArchive('seed', SIZE, [KEY, T1_KEY]);

  // Replica 0 (t1) and 1 download through node peer 0, replica 2 through node peer 1; the URLs are signed at
  // another moment than the preheat's (the filter makes the task ids equal).
  const urls = new Map<string, string>();
  for (const key of [KEY, T1_KEY]) urls.set(key, await bed.signedEarlier(key));
  const peerOf = [0, 0, 1];
  fleet = await startModelServerFleet(3, (i) => ({
    proxyURL: bed.network.peers[peerOf[i]!]!.proxyURL,
    objectURL: (fileName: string) => urls.get(fileName)!,
    // As the plugin: the tag the storage credentials give (the owned preheat's, made with the same Secret).
    tag: bed.tag,
    workerStartMs: 50,
  }));
  await bed.createSecrets(kc, ns);

  // Static endpoints on this machine (refused unless allowed).
  operator = await startRealNetworkOperator(kc, bed.network.managerURL, [
    '--allowed-endpoint-hosts',
    '127.0.0.1',
  ]);
  await bed.network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await operator?.stop();
  await fleet?.close();
  await bed?.stop();
});

afterEach(async ({ task }) => {
  if (task.result?.state !== 'fail') return;
  const seen = await peerload.getModelPreheat('seeded-preheat').then(
    (o) => JSON.stringify(o.status),
    (err: Error) => err.message,
  );
  console.error(`${await bed.network.report()}\nmodelpreheats/seeded-preheat: ${seen}`);
});

/** Creates a ServedModel on static endpoints; resolves with create → Ready on all of them, ms. */
async function createUntilReady(name: string, spec: Record<string, unknown>, replicas: number) {
  const created = performance.now();
  await peerload.createServedModel(name, spec);
  const sm = await peerload.untilReady(name, replicas, { timeoutMs: 300_000, intervalMs: 100 });
  return { sm, readyMs: performance.now() - created };
}

describe('seed-peer preheat without node targeting on the real network', () => {
  it('static endpoints: Ready about one download after creation, the origin read once', async () => {
    // t1: one cold download through one node peer, no preheat, the same machinery.
    const t1 = await createUntilReady(
      't1',
      { modelName: 't1', fileName: T1_KEY, modelServer: { endpoints: [fleet.urls[0]!] } },
      1,
    );
    const before = bed.origin.bytesServed(KEY);
    const { sm, readyMs } = await createUntilReady(
      'seeded',
      {
        modelName: 'seeded',
        fileName: KEY,
        modelServer: { endpoints: [fleet.urls[1]!, fleet.urls[2]!] },
        preheat: {
          create: true,
          scope: 'single_seed_peer',
          objectStorage: bed.objectStorage(),
          manager: bed.manager(),
        },
      },
      2,
    );
    const budget = Math.max(1.5 * t1.readyMs, t1.readyMs + 5000);
    const running = await peerload.getModelPreheat('seeded-preheat');
    console.log(
      `[seed-preheat] ${size} bytes: Ready 2/2 ${(readyMs / 1000).toFixed(2)} s after creation; t1 ` +
        `${(t1.readyMs / 1000).toFixed(2)} s; budget max(1.5 × t1, t1 + 5 s) ${(budget / 1000).toFixed(2)} s; ` +
        `the preheat's job ${running.status?.jobID} ${running.status?.state} then`,
    );
    // Not the manager's SUCCESS (its first state sync is 30 s after the create): the job underway opened the gate.
    expect(running.spec.scope).toBe('single_seed_peer');
    expect(running.spec.targets).toBeUndefined();
    expect(running.status?.state, `Ready after ${readyMs} ms`).not.toBe('SUCCESS');
    // Generous against a shared machine; the benchmark (row 13) holds the budget itself.
    expect(readyMs).toBeLessThan(budget + 10_000);

    const preheat = await peerload.untilState('seeded-preheat', 'SUCCESS', {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    // Both replicas downloaded the preheat's task, through their own node's peer.
    const taskID = preheat.status!.tasks![0]!.taskID;
    const downloads = fleet.instances.slice(1).flatMap((f) => f.downloads);
    expect(
      downloads.map((d) => [d.taskID, d.bytes]),
      JSON.stringify(sm.status?.replicas),
    ).toEqual([
      [taskID, size],
      [taskID, size],
    ]);
    // The origin served the object once (the seed peer's fetch), plus the daemons' 1-byte probes.
    const served = bed.origin.bytesServed(KEY) - before;
    console.log(`[seed-preheat] origin served ${served} bytes of the ${size}-byte object`);
    expect(served).toBeGreaterThanOrEqual(size);
    expect(served).toBeLessThanOrEqual(size + 64);
    // Neither node peer went to the origin for the task: each joined the seed peer's.
    for (const peer of bed.network.peers)
      expect(
        (await peer.logs()).split('\n').filter((l) => l.includes(taskID) && l.includes('back to source')),
        peer.name,
      ).toEqual([]);
  });
});
