/**
 * Scenario 4: one model on 10 replicas from a bandwidth-limited origin (MinIO behind test/support/bench-throttle.ts,
 * one shared budget, default 50 MB/s).
 *
 * peerload: a ServedModel with `preheat.create` on 10 emulated replicas (EndpointSlices of a Service, loopback
 *   dispatcher): the operator's ModelPreheat makes the manager emulator's seed peer (127.0.0.2) fetch the object
 *   once, then the replicas' plugin downloads go through a node peer whose parent is the seed peer.
 * reference: what TorchServe's own `POST /models?url=<signed URL>` does on each replica: every replica downloads
 *   the signed URL from the origin itself (10 concurrent direct GETs through the same throttle), then registers
 *   (`POST /models?url=`), scales and waits for its worker, on the same emulators with the same latencies.
 * Both: time from start to all 10 replicas READY; origin bytes (counted by the throttle) / model size.
 */
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { KubeObject } from '../../src/runtime/index.ts';
import { effectiveFilter } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { startThrottle } from '../../test/support/bench-throttle.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startManagerEmulator } from '../../test/support/manager-emulator.ts';
import { startMinIO } from '../../test/support/minio.ts';
import { startModelServerFleet, type ModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { startPeerProxy } from '../../test/support/peer-proxy.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import {
  GVR,
  benchClient,
  deleteServedModelAndWait,
  isReady,
  newNamespace,
  operatorFlags,
  watchObjects,
} from '../lib/kube.ts';
import { MiB, progress, sleep, stat, until, within, type Row } from '../lib/report.ts';

const REPLICAS = 10;
const BUCKET = 'models';
const KEY = 'serving/origin-bench.mar';
const SECRETS = { group: '', version: 'v1', resource: 'secrets', kind: 'Secret', namespaced: true };

export interface S4Options {
  reps: number;
  originMBps: number;
  sizeMiB?: number;
}

/** One replica, TorchServe style: download the URL itself, register, scale to 1 worker, wait until READY. */
async function directReplica(base: string, url: string, name: string): Promise<number> {
  const res = await request(url, { method: 'GET', bodyTimeout: 600_000, headersTimeout: 60_000 });
  let bytes = 0;
  for await (const c of res.body) bytes += (c as Buffer).length;
  if (res.statusCode !== 200) throw new Error(`direct GET answered ${res.statusCode}`);
  const reg = await fetch(
    `${base}/models?url=${encodeURIComponent(`${name}.mar`)}&model_name=${name}&initial_workers=0`,
    { method: 'POST' },
  );
  await reg.arrayBuffer();
  if (reg.status !== 200) throw new Error(`POST /models?url= answered ${reg.status}`);
  const scale = await fetch(`${base}/models/${name}?min_worker=1&max_worker=1`, { method: 'PUT' });
  await scale.arrayBuffer();
  for (let i = 0; i < 2000; i++) {
    const d = (await (await fetch(`${base}/models/${name}`)).json()) as { workers: { status: string }[] }[];
    if (d[0]?.workers.some((w) => w.status === 'READY')) return bytes;
    await sleep(20);
  }
  throw new Error('no READY worker within 40 s');
}

export async function scenario4(cp: ControlPlane, o: S4Options): Promise<{ rows: Row[]; raw: unknown }> {
  const size = (o.sizeMiB ?? 100) * MiB;
  const rate = o.originMBps * 1e6;
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench-origin-'));
  const closers: (() => Promise<unknown>)[] = [];
  const kube = benchClient(cp);
  closers.push(() => kube.close());
  try {
    const minio = await startMinIO();
    closers.push(() => minio.stop());
    await minio.createBucket(BUCKET);
    const file = join(work, 'model.mar');
    await new Promise<void>((resolve, reject) => {
      const out = createWriteStream(file);
      out.on('error', reject);
      for (let left = size; left > 0; left -= 4 * MiB) out.write(randomBytes(Math.min(left, 4 * MiB)));
      out.end(resolve);
    });
    await minio.putObject(BUCKET, KEY, await readFile(file));
    const throttle = await startThrottle({
      target: { host: '127.0.0.1', port: Number(new URL(minio.endpoint).port) },
      bytesPerSecond: rate,
    });
    closers.push(() => throttle.close());
    // The origin as everyone sees it: the throttled address (URLs are signed for it; the relay keeps Host).
    const location = { ...minio.location(BUCKET), endpoint: throttle.url };
    const creds = minio.credentials();
    const filter = effectiveFilter(location);
    const signedAt = async () =>
      (await signObjectURL(location, KEY, creds, { expiresSeconds: 6 * 3600 })).url;
    const replicaURL = await signedAt();

    const seed = await startPeerProxy({ host: '127.0.0.2' });
    const node = await startPeerProxy({ parent: seed.url });
    closers.push(() => Promise.all([seed.close(), node.close()]));
    const manager = await startManagerEmulator({ peer: seed });
    closers.push(() => manager.close());
    const fleet: ModelServerFleet = await startModelServerFleet(REPLICAS, {
      registrationLatencyMs: 200,
      workerStartMs: 300,
      proxyURL: node.url,
      objectURL: () => replicaURL,
      filter,
      // As the plugin: the tag the storage credentials give (the preheat's, signed with the same Secret).
      tag: credentialTag(location, creds),
    });
    closers.push(() => fleet.close());

    const ns = await newNamespace(kube, 'bench4');
    const kc = kubeConfig(cp.kubeconfigPath);
    await kube.resource(SECRETS).create({
      metadata: { name: 's3-credentials', namespace: ns },
      stringData: { access_key: minio.accessKey, secret_key: minio.secretKey },
    } as unknown as KubeObject);
    const svc = new ServiceEndpoints(kc, ns, 'torchserve');
    for (const [i, url] of fleet.urls.entries()) await svc.add(`ts-${i}`, url);
    const operator = await startManager(
      kc,
      operatorFlags(ns, { managerURL: manager.url, backoffStart: '100ms' }),
      [
        modelPreheatController,
        (ctx) =>
          createServedModelController(ctx, { dispatcher: loopbackDispatcher(), cleanupGraceMs: 5_000 }),
      ],
    );
    closers.push(() => operator.stop());
    await within('operator informers synced', 30_000, operator.manager.informers.waitForSync());
    const ready = new Map<string, number>();
    const watch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
      if (!ready.has(obj.metadata.name) && isReady(obj)) ready.set(obj.metadata.name, at);
    });
    closers.push(async () => watch.stop());
    await watch.ready;

    const r = {
      peerloadMs: [] as number[],
      peerloadOrigin: [] as number[],
      directMs: [] as number[],
      directOrigin: [] as number[],
    };
    const peerload = async (rep: number) => {
      seed.reset();
      node.reset();
      for (const e of fleet.instances) e.wipe();
      throttle.resetStats();
      const name = `origin-${rep}`;
      const t0 = performance.now();
      await kube.resource(GVR.servedModels).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ServedModel',
        metadata: { name, namespace: ns },
        spec: {
          modelName: name,
          fileName: KEY,
          modelServer: { service: { name: 'torchserve' } },
          workers: { min: 1 },
          preheat: {
            create: true,
            objectStorage: { ...location, credentialsSecretRef: { name: 's3-credentials' } },
          },
          rollout: { maxConcurrent: 10, seedFirst: true },
        },
      } as unknown as KubeObject);
      await until(`${name} Ready`, 600_000, () => ready.has(name));
      r.peerloadMs.push(ready.get(name)! - t0);
      r.peerloadOrigin.push(throttle.bytesDown);
      await deleteServedModelAndWait(kube, ns, name);
    };
    const direct = async (rep: number) => {
      for (const e of fleet.instances) e.wipe();
      throttle.resetStats();
      const name = `direct-${rep}`;
      const t0 = performance.now();
      await Promise.all(fleet.urls.map(async (base) => directReplica(base, await signedAt(), name)));
      r.directMs.push(performance.now() - t0);
      r.directOrigin.push(throttle.bytesDown);
    };
    for (let rep = 0; rep < o.reps; rep++) {
      if (rep % 2 === 0) {
        await peerload(rep);
        await direct(rep);
      } else {
        await direct(rep);
        await peerload(rep);
      }
      progress(
        `s4 rep ${rep + 1}: peerload ${r.peerloadMs.at(-1)!.toFixed(0)} ms, origin ${(r.peerloadOrigin.at(-1)! / size).toFixed(3)}× size; ` +
          `direct ${r.directMs.at(-1)!.toFixed(0)} ms, origin ${(r.directOrigin.at(-1)! / size).toFixed(3)}× size`,
      );
    }
    const scenario = `1 model (${(size / MiB).toFixed(0)} MiB) on 10 replicas, origin limited to ${o.originMBps} MB/s`;
    const originRatio = stat(r.peerloadOrigin.map((b) => b / size));
    const timeRatio = stat(r.peerloadMs.map((ms, i) => ms / r.directMs[i]!));
    const rows: Row[] = [
      {
        id: '4a',
        scenario,
        metric: 'origin bytes / model size',
        unit: '',
        value: originRatio,
        reference: stat(r.directOrigin.map((b) => b / size)),
        referenceLabel: '(each replica downloads the URL itself)',
        target: 'peerload = 1.0 (direct: 10.0)',
        // Response heads and the like: allow 1 % over the body bytes.
        pass: originRatio.max <= 1.01 && originRatio.min >= 0.99,
        notes: 'bytes counted by the throttling relay (response heads included)',
      },
      {
        id: '4b',
        scenario,
        metric: 'time to all 10 replicas READY',
        unit: 's',
        value: stat(r.peerloadMs.map((x) => x / 1000)),
        reference: stat(r.directMs.map((x) => x / 1000)),
        referenceLabel: '(POST /models?url= style: 10 direct downloads)',
        ratio: timeRatio,
        target: 'ratio reported',
        notes: `one origin transfer alone takes ≥ ${(size / rate).toFixed(2)} s at ${o.originMBps} MB/s; ten take ≥ ${((10 * size) / rate).toFixed(2)} s`,
      },
    ];
    return { rows, raw: { sizeBytes: size, originBytesPerSecond: rate, ...r } };
  } finally {
    for (const c of closers.reverse())
      await c().catch((e: unknown) => progress(`cleanup: ${(e as Error).message}`));
    await rm(work, { recursive: true, force: true });
  }
}
