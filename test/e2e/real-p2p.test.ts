/**
 * peerload on the REAL Dragonfly network (the run's shared one, test/support/shared-dragonfly.ts: manager and
 * scheduler v2.5.1, dfdaemon 1.4.2 as a seed peer and node peers, of which this file uses two, MariaDB, Redis), with
 * MinIO as the origin behind a counting proxy (its own port: its URLs, so its task ids, are this file's alone), the
 * real operator's controllers, one real TorchServe with the plugin and one emulated replica:
 *   - a ModelPreheat of an S3 object reaches SUCCESS on the real manager (JWT sign-in), the seed peer in status;
 *   - the plugin in TorchServe downloads it through a node peer: same task id as status, origin served once;
 *   - a ServedModel with preheat.create on 2 replicas, each behind its own node peer;
 *   - /oapi/v1 with a personal access token created through the manager's API;
 *   - an origin 404 is never reported as success; a burst of preheats meets the manager's rate limit and
 *     every one still succeeds;
 *   - `peerload taskid` equals the daemon's X-Dragonfly-Task-ID for the shared vectors.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitFor } from '../support/kube.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, type DragonflyView } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildLargeModelArchive, buildModelArchive, type ModelArchive } from '../support/model-archive.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import type { RunningManager } from '../support/runtime-harness.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { taskID } from '../../src/storage/taskid.ts';
import type { ModelPreheat } from '../../src/api/index.ts';
import { TASKID_VECTORS } from '../fixtures/taskid-vectors.ts';

const BUCKET = fileBucket('models');
const KEY = 'real/tiny.mar';
const SM_KEY = 'real/tiny-sm.mar';

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let peerload: PeerloadNamespace;
let work: string;
let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let ts: TorchServe;
let fleet: ModelServerFleet;
let archive: ModelArchive;
let operator: RunningManager;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('real-p2p'));
  work = await mkdtemp(join(tmpdir(), 'peerload-real-p2p-'));
  const jarPromise = pluginJar();

  network = await sharedDragonfly(inject('dragonflyService'), 2);
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  // Signed URLs name the counting proxy as the endpoint: MinIO verifies the signature over the same Host.
  origin = await startCountingProxy(minio.endpoint);
  // Larger than 4 MiB: dfdaemon 1.4 fetches content up to its minimum piece length (4 MiB) straight from the
  // origin, without the scheduler, so only larger objects travel between peers.
  const base = await buildModelArchive(work, { modelName: 'tiny-base' });
  archive = await buildLargeModelArchive(base, work, 'tiny', 6 << 20);
  await minio.putObject(BUCKET, KEY, await readFile(archive.path));
  await minio.putObject(BUCKET, SM_KEY, await readFile(archive.path));

  const [peer1, peer2] = network.peers;
  const location = { ...minio.location(BUCKET), endpoint: origin.url };
  const config = join(work, 'p2p-endpoint.json');
  await writePluginConfig(config, {
    ...minioPluginConfig(minio, BUCKET, peer1!.proxyURL),
    object_storage: {
      ...(minioPluginConfig(minio, BUCKET, peer1!.proxyURL)['object_storage'] as object),
      endpoint: origin.url,
    },
  });
  ts = await startTorchServe({ pluginJars: [await jarPromise], env: { P2P_ENDPOINT_CONFIG: config } });
  // The emulated replica downloads URLs signed at another moment (other date and signature) through the
  // second node peer: only the filter makes their task ids equal to the preheat's.
  const signedEarlier = new Map<string, string>();
  for (const key of [KEY, SM_KEY]) {
    const { url } = await signObjectURL(location, key, minio.credentials(), {
      now: new Date(Date.now() - 60_000),
      expiresSeconds: 3600,
    });
    signedEarlier.set(key, url);
  }
  fleet = await startModelServerFleet(1, {
    proxyURL: peer2!.proxyURL,
    objectURL: (fileName) => signedEarlier.get(fileName)!,
    // As the plugin: the tag the storage credentials give (the preheat's, signed with the same Secret).
    tag: credentialTag(location, minio.credentials()),
    workerStartMs: 50,
    modelVersion: '1.0',
  });

  const secret = (name: string, stringData: Record<string, string>) =>
    core.createNamespacedSecret({ namespace: ns, body: { metadata: { name }, stringData } });
  await secret('s3-credentials', { access_key: minio.accessKey, secret_key: minio.secretKey });
  await secret('manager-user', { username: ROOT_USER.name, password: ROOT_USER.password });
  await secret('manager-token', {
    token: await network.createPersonalAccessToken('peerload-e2e', ['job', 'cluster']),
  });
  await secret('torchserve-keys', {
    'ts-0.json': await readFile(join(ts.workDir, 'key_file.json'), 'utf8'),
    'emulated-0.json': 'emulated replicas ignore this',
  });
  const svc = new ServiceEndpoints(kc, ns, 'torchserve');
  await svc.add('ts-0', ts.managementURL);
  await svc.add('emulated-0', fleet.urls[0]!);

  operator = await startRealNetworkOperator(kc, network.managerURL, ['--workers', '16']);
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await operator?.stop();
  await Promise.allSettled([ts?.stop(), fleet?.close(), origin?.close(), minio?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

const jwtManager = () => ({ url: network.managerURL, signInSecretRef: { name: 'manager-user' } });
const storageLocation = () => ({
  type: 's3',
  bucket: BUCKET,
  endpoint: origin.url,
  pathStyle: true,
  region: minio.region,
  credentialsSecretRef: { name: 's3-credentials' },
});
const objectStorage = (keys: string[]) => ({ ...storageLocation(), keys });

/** Waits until the condition `type` of a ModelPreheat is no longer Unknown and returns the resource. */
async function settled(name: string, timeoutMs = 300_000): Promise<ModelPreheat> {
  return waitFor(
    `${name} settled`,
    async () => {
      const o = await peerload.getModelPreheat(name);
      const c = o.status?.conditions?.find((x) => x.type === 'Succeeded');
      return c && c.status !== 'Unknown' ? o : undefined;
    },
    { timeoutMs, intervalMs: 1000 },
  ).catch(async (err) => {
    throw new Error(
      `${(err as Error).message}: ${JSON.stringify((await peerload.getModelPreheat(name)).status)}`,
    );
  });
}

const size = async () => (await readFile(archive.path)).length;

describe('peerload on the real Dragonfly network', () => {
  let preheatTask: string;

  it('a ModelPreheat of an S3 object succeeds on the real manager (JWT) with the seed peer in status', async () => {
    await peerload.createModelPreheat('tiny', {
      type: 'file',
      objectStorage: objectStorage([KEY]),
      manager: jwtManager(),
      retry: { limit: 0 },
    });
    const o = await settled('tiny');
    const c = o.status!.conditions!.find((x) => x.type === 'Succeeded')!;
    expect(c, c.message).toMatchObject({ status: 'True', reason: 'JobSucceeded' });
    expect(o.status!.state).toBe('SUCCESS');
    expect(o.status!.successCount).toBeGreaterThanOrEqual(1);
    expect(o.status!.successTasks![0]).toMatchObject({
      hostname: network.seedPeer!.hostname,
      ip: network.seedPeer!.ip,
    });
    preheatTask = o.status!.tasks![0]!.taskID;
    expect(preheatTask).toMatch(/^[0-9a-f]{64}$/);
    // The seed peer fetched the whole object from the origin, once (plus the daemon's 1-byte range probe).
    expect(origin.bytesServed(KEY)).toBeGreaterThanOrEqual(await size());
    expect(origin.bytesServed(KEY)).toBeLessThanOrEqual((await size()) + 1);
  });

  it('the plugin in TorchServe downloads it through a node peer: the same task, a hit, the origin not read again', async () => {
    const before = origin.bytesServed(KEY);
    const res = await fetch(
      `${ts.managementURL}/p2p/models?file_name=${encodeURIComponent(KEY)}&initial_workers=1`,
      {
        method: 'POST',
        headers: ts.managementAuth(),
      },
    );
    const body = (await res.json()) as { Status: string; TaskID?: string };
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body.TaskID).toBe(preheatTask);
    // The daemon probes the origin with a 1-byte range on a hit (the signed URL must still be valid); no more.
    expect(origin.bytesServed(KEY) - before).toBeLessThanOrEqual(1);
    const peerLog = await network.peers[0]!.logs();
    expect(peerLog).toContain(preheatTask);
  });
});

// The real manager reads a preheat job's state 30 s after creating it at the earliest (a fixed delay in v2.5.1), so
// each test below waits at least that long for its own job. None of them uses another's objects, nor counts the
// origin's reads of a key another one preheats (the ServedModel has its own): they wait for their jobs side by side.
describe.concurrent('independent jobs on the real Dragonfly network', () => {
  it('a ServedModel with preheat.create registers on 2 replicas, each behind its own node peer', async () => {
    const key = SM_KEY;
    await peerload.createServedModel('tiny-sm', {
      modelName: 'tiny-sm',
      fileName: key,
      modelServer: {
        service: { name: 'torchserve' },
        managementTokenSecretRef: { name: 'torchserve-keys', key: '{pod}.json' },
      },
      workers: { min: 1 },
      preheat: { create: true, objectStorage: storageLocation(), manager: jwtManager() },
    });
    await waitFor(
      'tiny-sm Ready 2/2',
      async () => {
        const o = await peerload.getServedModel('tiny-sm');
        return (
          o.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' && o.status.ready === '2/2'
        );
      },
      { timeoutMs: 600_000, intervalMs: 1000 },
    ).catch(async (err) => {
      throw new Error(
        `${(err as Error).message}: ${JSON.stringify((await peerload.getServedModel('tiny-sm')).status)}`,
      );
    });
    // The replicas' gate opens once the preheat's job is underway, so Ready may come before the manager reports the
    // job's SUCCESS on its next state sync: the preheat is waited for, not assumed.
    await waitFor(
      'tiny-sm-preheat SUCCESS',
      async () => (await peerload.getModelPreheat('tiny-sm-preheat')).status?.state === 'SUCCESS',
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    // The object once, to the seed peer, plus one 1-byte range probe per peer (the seed and both node peers).
    expect(origin.bytesServed(key)).toBeGreaterThanOrEqual(await size());
    expect(origin.bytesServed(key)).toBeLessThanOrEqual((await size()) + 3);
  });

  it('/oapi/v1 with a personal access token created through the manager API', async () => {
    await peerload.createModelPreheat('tiny-pat', {
      type: 'file',
      objectStorage: objectStorage([KEY]),
      manager: {
        url: network.managerURL,
        apiPath: '/oapi/v1',
        tokenSecretRef: { name: 'manager-token', key: 'token' },
      },
      retry: { limit: 0 },
    });
    const c = (await settled('tiny-pat')).status!.conditions!.find((x) => x.type === 'Succeeded')!;
    expect(c, c.message).toMatchObject({ status: 'True', reason: 'JobSucceeded' });
  });

  it('an origin 404 is never reported as success', async () => {
    await peerload.createModelPreheat('missing', {
      type: 'file',
      objectStorage: objectStorage(['real/does-not-exist.mar']),
      manager: jwtManager(),
      retry: { limit: 0 },
    });
    const c = (await settled('missing')).status!.conditions!.find((x) => x.type === 'Succeeded')!;
    expect(c.status).toBe('False');
    expect(c.reason).toMatch(/NoPeerSucceeded|JobFailed/);
  });

  it('an unknown scheduler cluster is a clear error, not an endless rate limit', async () => {
    await peerload.createModelPreheat('cluster-7', {
      type: 'file',
      objectStorage: objectStorage([KEY]),
      manager: jwtManager(),
      schedulerClusterIDs: [7],
    });
    const c = (await settled('cluster-7', 60_000)).status!.conditions!.find((x) => x.type === 'Succeeded')!;
    expect(c).toMatchObject({ status: 'False', reason: 'SchedulerClusterNotFound' });
    expect(c.message).toContain('scheduler cluster 7 does not exist');
  });

  it('a burst of 30 preheats meets the manager rate limit, backs off, and every one succeeds', async () => {
    const names = Array.from({ length: 30 }, (_, i) => `burst-${i}`);
    await Promise.all(
      names.map((n) =>
        peerload.createModelPreheat(n, {
          type: 'file',
          objectStorage: objectStorage([KEY]),
          manager: jwtManager(),
          // The manager rate-limits only jobs that name their scheduler clusters (10 per second per cluster).
          schedulerClusterIDs: [1],
          retry: { limit: 0 },
        }),
      ),
    );
    // The manager's 429 is its pace, not a failure: no Event says it; the objects' status does while they wait.
    const limited = new Set<string>();
    const watching = setInterval(() => {
      peerload
        .listModelPreheats()
        .then((items) => {
          for (const o of items)
            if (o.status?.conditions?.some((c) => c.reason === 'ManagerRateLimited'))
              limited.add(o.metadata.name);
        })
        .catch(() => undefined);
    }, 100);
    let results: ModelPreheat[];
    try {
      results = await Promise.all(names.map((n) => settled(n, 600_000)));
    } finally {
      clearInterval(watching);
    }
    for (const o of results) {
      const c = o.status!.conditions!.find((x) => x.type === 'Succeeded')!;
      expect(c, `${o.metadata.name}: ${c.message}`).toMatchObject({ status: 'True' });
    }
    expect(limited.size).toBeGreaterThan(0);
    const events = await core.listNamespacedEvent({ namespace: ns });
    const burst = events.items.filter((e) => /^burst-/.test(e.involvedObject.name ?? ''));
    expect(burst.filter((e) => e.type === 'Warning')).toEqual([]);
  });
});

describe('task identity on the real daemon', () => {
  let files: Origin;
  beforeAll(async () => {
    files = await startOrigin({});
  });
  afterAll(() => files?.close());

  it('`peerload taskid` equals X-Dragonfly-Task-ID for every vector the proxy can carry', async () => {
    const { vectors } = TASKID_VECTORS;
    // A fragment never reaches a proxy (it is not sent), the proxy has no revision header, and the daemon refuses
    // the vectors' 1 KiB piece length (500, error type proxy: below its minimum piece length).
    const carried = vectors.filter(
      (v) => !v.url.includes('#') && v.revision === null && v.pieceLength === null,
    );
    expect(carried.length).toBeGreaterThanOrEqual(10);
    const peer = network.peers[0]!;
    let compared = 0;
    for (const v of carried) {
      // The vector's path and query on the local origin; bytes a request line cannot carry (space, UTF-8) are
      // percent-encoded, and the expected id is computed from exactly what is sent.
      const original = new URL(v.url.replace(/[^\x21-\x7e]/g, (c) => encodeURIComponent(c)));
      const query = v.url.includes('?') ? v.url.slice(v.url.indexOf('?')) : '';
      const url = `${files.url}${original.pathname}${query}`.replace(/[^\x21-\x7e]/g, (c) =>
        encodeURIComponent(c),
      );
      files.files.set(original.pathname, Buffer.from(`vector ${compared}`));
      const headers: Record<string, string> = { 'X-Dragonfly-Use-P2P': 'true' };
      const filter = v.filter.filter((f) => f !== 'none');
      if (filter.length > 0) headers['X-Dragonfly-Filtered-Query-Params'] = filter.join(',');
      if (v.tag !== null) headers['X-Dragonfly-Tag'] = v.tag;
      if (v.application !== null) headers['X-Dragonfly-Application'] = v.application;
      if (v.pieceLength !== null) headers['X-Dragonfly-Piece-Length'] = String(v.pieceLength);
      const { statusCode, headers: got } = await proxyGet(peer.proxyURL, url, headers);
      expect(statusCode, `${url} ${JSON.stringify(headers)} -> ${JSON.stringify(got)}`).toBeLessThan(300);
      const expected = taskID({
        url,
        filter,
        rule: '1.4',
        ...(v.tag !== null ? { tag: v.tag } : {}),
        ...(v.application !== null ? { application: v.application } : {}),
        ...(v.pieceLength !== null ? { pieceLength: v.pieceLength } : {}),
      });
      expect(got['x-dragonfly-task-id'], `${url} ${JSON.stringify(headers)}`).toBe(expected);
      compared++;
    }
  });
});

/** A GET through a forward proxy (absolute-form request line), the body drained. */
async function proxyGet(
  proxyURL: string,
  url: string,
  headers: Record<string, string>,
): Promise<{ statusCode: number; headers: Record<string, string | string[] | undefined> }> {
  const { request } = await import('node:http');
  const proxy = new URL(proxyURL);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy.hostname,
        port: proxy.port,
        method: 'GET',
        path: url,
        headers: { ...headers, host: new URL(url).host },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ statusCode: res.statusCode ?? 0, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}
