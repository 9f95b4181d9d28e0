/**
 * The whole flow from a seed peer to an answering model, end to end, on the real apiserver:
 *   ServedModel (preheat.create) → owned ModelPreheat → manager job → the seed peer fetches the object from MinIO
 *   (SigV4 verified) once → the model registered on 5 emulated replicas and on 1 REAL TorchServe 0.12.0 with the
 *   peerload plugin, every download through a node peer that finds the task in the network (same task id) →
 *   min_worker scaled → READY → an inference call answers label→score JSON (the test archive's handler).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { waitFor } from '../support/kube.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildModelArchive, LABELS, type ModelArchive } from '../support/model-archive.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';

const run = promisify(execFile);
const REPO_ROOT = resolve(import.meta.dirname, '../..');
const BUCKET = 'models';
const KEY = 'serving/tiny.mar';

let kc: k8s.KubeConfig;
let peerload: PeerloadNamespace;
let ns: string;
let work: string;
let minio: MinIO;
let seedPeer: PeerProxy;
let nodePeer: PeerProxy;
let manager: ManagerEmulator;
let fleet: ModelServerFleet;
let ts: TorchServe;
let archive: ModelArchive;
let operator: RunningManager;

beforeAll(async () => {
  ({ kc, ns, peerload } = await testNamespace('seed-flow'));
  work = await mkdtemp(join(tmpdir(), 'peerload-seed-flow-'));

  const jar = await pluginJar();

  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  archive = await buildModelArchive(work, { modelName: 'tiny' });
  await minio.putObject(BUCKET, KEY, await readFile(archive.path));

  // The network: a seed peer (the manager's) and the node's peer, which asks the seed peer before the origin.
  seedPeer = await startPeerProxy();
  nodePeer = await startPeerProxy({ parent: seedPeer.url });
  manager = await startManagerEmulator({ peer: seedPeer });

  const location = minio.location(BUCKET);
  // Emulated replicas download a URL signed at another moment than the operator's (different X-Amz-Date and
  // signature): only the filter makes the task ids equal.
  const signed = await signObjectURL(location, KEY, minio.credentials(), {
    now: new Date(Date.now() - 90_000),
    expiresSeconds: 3600,
  });
  fleet = await startModelServerFleet(5, {
    proxyURL: nodePeer.url,
    objectURL: () => signed.url,
    // As the plugin: the tag the storage credentials give (the preheat's, signed with the same Secret).
    tag: credentialTag(location, minio.credentials()),
    workerStartMs: 50,
    modelVersion: '1.0',
  });

  // The real TorchServe with the plugin, configured by its configuration file, token authorization on.
  const config = join(work, 'p2p-endpoint.json');
  await writePluginConfig(config, minioPluginConfig(minio, BUCKET, nodePeer.url));

  ts = await startTorchServe({ pluginJars: [jar], env: { P2P_ENDPOINT_CONFIG: config } });

  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNamespacedSecret({
    namespace: ns,
    body: {
      metadata: { name: 's3-credentials' },
      stringData: { access_key: minio.accessKey, secret_key: minio.secretKey },
    },
  });
  // Per-pod TorchServe keys, as a sidecar publishing each pod's key_file.json would keep them.
  const keyFile = await readFile(join(ts.workDir, 'key_file.json'), 'utf8');
  await core.createNamespacedSecret({
    namespace: ns,
    body: {
      metadata: { name: 'torchserve-keys' },
      stringData: Object.fromEntries([
        ...fleet.urls.map((_, i) => [`ts-${i}.json`, 'emulated-replicas-ignore-this']),
        ['ts-5.json', keyFile],
      ]),
    },
  });
  const svc = new ServiceEndpoints(kc, ns, 'torchserve');
  for (const [i, url] of [...fleet.urls, ts.managementURL].entries()) await svc.add(`ts-${i}`, url);

  const dispatcher = loopbackDispatcher();
  operator = await startManager(
    kc,
    [
      '--no-leader-elect',
      '--manager-url',
      manager.url,
      '--poll-backoff-start',
      '200ms',
      '--poll-backoff-max',
      '2s',
    ],
    [modelPreheatController, (ctx) => createServedModelController(ctx, { dispatcher })],
  );
}, 900_000);

afterAll(async () => {
  await operator?.stop();
  await Promise.allSettled([
    ts?.stop(),
    fleet?.close(),
    manager?.close(),
    nodePeer?.close(),
    seedPeer?.close(),
    minio?.stop(),
  ]);
  if (work) await rm(work, { recursive: true, force: true });
});

const sm = (name: string) => peerload.getServedModel(name);
const mph = (name: string) => peerload.getModelPreheat(name);

/** A ServedModel of an object in the MinIO bucket, preheated by the operator (`preheat.create`). */
async function createServedModel(
  name: string,
  o: {
    modelName: string;
    fileName: string;
    service: string;
    minWorkers: number;
    filteredQueryParams?: string[];
    rollout?: Record<string, unknown>;
  },
): Promise<void> {
  await peerload.createServedModel(name, {
    modelName: o.modelName,
    fileName: o.fileName,
    modelServer: {
      service: { name: o.service },
      managementTokenSecretRef: { name: 'torchserve-keys', key: '{pod}.json' },
    },
    workers: { min: o.minWorkers },
    preheat: {
      create: true,
      objectStorage: {
        type: 's3',
        bucket: BUCKET,
        endpoint: minio.endpoint,
        pathStyle: true,
        region: minio.region,
        credentialsSecretRef: { name: 's3-credentials' },
        ...(o.filteredQueryParams ? { filteredQueryParams: o.filteredQueryParams } : {}),
      },
    },
    ...(o.rollout ? { rollout: o.rollout } : {}),
  });
}

describe('the flow from a seed peer to inference, declaratively', () => {
  it('preheats once, registers on 6 replicas (1 real TorchServe) with cache hits only, scales, and serves inference', async () => {
    await createServedModel('tiny', {
      modelName: 'tiny',
      fileName: KEY,
      service: 'torchserve',
      minWorkers: 1,
      rollout: { maxConcurrent: 3, seedFirst: true },
    });

    const ready = await waitFor(
      'tiny Ready 6/6',
      async () => {
        const o = await sm('tiny');
        return o.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' &&
          o.status.ready === '6/6'
          ? o
          : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 500 },
    ).catch(async (err) => {
      throw new Error(`${(err as Error).message}: ${JSON.stringify((await sm('tiny')).status)}`);
    });
    expect(ready.status!.conditions!.find((c) => c.type === 'Preheated')!.status).toBe('True');

    // The owned ModelPreheat: created for fileName with the plugin's filter, owned by the ServedModel, succeeded.
    const preheat = await mph('tiny-preheat');
    expect(preheat.metadata.ownerReferences?.[0]).toMatchObject({
      kind: 'ServedModel',
      name: 'tiny',
      controller: true,
    });
    expect(preheat.status?.state).toBe('SUCCESS');
    const preheatTask = preheat.status!.tasks![0]!.taskID;

    // Every download of the model went through the node peer with the preheated task id, and none of them
    // reached the origin; the origin (MinIO) served the object's bytes exactly once, to the seed peer.
    const size = (await stat(archive.path)).size;
    const downloads = nodePeer.requests.filter((r) => r.method === 'GET');
    expect(downloads).toHaveLength(6);
    for (const d of downloads) expect(d.taskID).toBe(preheatTask);
    expect(nodePeer.stats.originRequests).toBe(0);
    expect(nodePeer.stats.remoteHits + nodePeer.stats.localHits).toBe(6);
    expect(seedPeer.stats.originRequests).toBe(1);
    expect(seedPeer.stats.originBytes).toBe(size);

    // The real TorchServe: registered by the plugin, scaled to 1 READY worker, answering inference (label→score JSON).
    const described = (await (
      await fetch(`${ts.managementURL}/models/tiny`, { headers: ts.managementAuth() })
    ).json()) as {
      minWorkers: number;
      workers: { status: string }[];
    }[];
    expect(described[0]!.minWorkers).toBe(1);
    expect(described[0]!.workers.filter((w) => w.status === 'READY')).toHaveLength(1);
    const form = new FormData();
    form.append('data', new Blob([Buffer.from('a tiny picture of a cat')]), 'cat.jpg');
    const res = await fetch(`${ts.inferenceURL}/predictions/tiny`, {
      method: 'POST',
      headers: ts.inferenceAuth(),
      body: form,
    });
    expect(res.status).toBe(200);
    const scores = (await res.json()) as Record<string, number>;
    expect(Object.keys(scores).sort()).toEqual([...LABELS].sort());
    const values = Object.values(scores);
    expect(values).toEqual([...values].sort((a, b) => b - a));
  });

  it('with a wrong preheat filter the downloads miss the preheated task (what `peerload check` catches)', async () => {
    const key = 'serving/tiny-wrong-filter.mar';
    await minio.putObject(BUCKET, key, await readFile(archive.path));
    const one = new ServiceEndpoints(kc, ns, 'torchserve-one');
    await one.add('ts-5', ts.managementURL);
    const originBefore = nodePeer.stats.originRequests;
    await createServedModel('wrong-filter', {
      modelName: 'tiny-wrong',
      fileName: key,
      service: 'torchserve-one',
      minWorkers: 0,
      // The signature and its date stay in the task id: every signing makes another task.
      filteredQueryParams: ['X-Amz-Algorithm', 'X-Amz-Credential'],
    });
    await waitFor(
      'wrong-filter Ready 1/1',
      async () => ((await sm('wrong-filter')).status?.ready === '1/1' ? true : undefined),
      {
        timeoutMs: 120_000,
        intervalMs: 500,
      },
    );
    const preheatTask = (await mph('wrong-filter-preheat')).status!.tasks![0]!.taskID;
    const download = nodePeer.requests
      .filter((r) => r.method === 'GET' && r.url.includes('tiny-wrong-filter'))
      .at(-1)!;
    expect(download.taskID).not.toBe(preheatTask);
    expect(nodePeer.stats.originRequests).toBe(originBefore + 1); // a cache miss: the node went to the origin

    // `peerload check` tells before anyone finds out: the plugin's config against both ServedModels.
    const manifest = async (name: string) => {
      const o = await sm(name);
      const path = join(work, `${name}.yaml`);
      await writeFile(
        path,
        JSON.stringify({ apiVersion: o.apiVersion, kind: o.kind, metadata: { name }, spec: o.spec }),
      );
      return path;
    };
    const check = (path: string) =>
      run(process.execPath, [
        join(REPO_ROOT, 'bin/peerload.js'),
        'check',
        '--plugin-config',
        join(work, 'p2p-endpoint.json'),
        path,
      ]).then(
        (r) => ({ code: 0, out: r.stdout }),
        (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout }),
      );
    const good = await check(await manifest('tiny'));
    expect(good.code).toBe(0);
    expect(good.out).toMatch(/^OK +serving\/tiny\.mar +task [0-9a-f]{64}$/m);
    const bad = await check(await manifest('wrong-filter'));
    expect(bad.code).toBe(1);
    expect(bad.out).toMatch(/^MISS +serving\/tiny-wrong-filter\.mar/m);
    expect(bad.out).toMatch(/X-Amz-Signature is not filtered/);
    expect(bad.out).not.toContain(minio.secretKey);
  });
});
