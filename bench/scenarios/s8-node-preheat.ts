/**
 * Scenario 8 (node-targeted preheat, on the REAL Dragonfly network: manager and scheduler v2.5.1, dfdaemon 1.4.2 as
 * a seed peer and 4 node peers on their own 127.0.0.x addresses, MinIO as the origin): one model of `sizeBytes` to
 * N = 1, 2, 4 replicas, one per node (a Node whose InternalIP is that peer's address, named by the EndpointSlice's
 * nodeName), each an emulated model server downloading through its own node's peer (or straight from the origin).
 * Measured: the ServedModel's create → all replicas Ready, for
 *   - nodes:  preheat.create with node targeting (scope all_peers, the replicas' nodes), every download a local hit;
 *   - seeds:  preheat.create with scope single_seed_peer, each node peer then fetches from the seed peer;
 *   - direct: no preheat, every replica downloads from the origin.
 * Every run uses an object of its own, so no cache carries over. The real manager ends jobs only at its next poll
 * (30 s on v2.5.1), which both preheat modes include; the time after the preheat (its job's end → all Ready) is
 * reported beside, as is the number of local hits.
 * Target: with node targeting every download is a local hit and the time to all Ready grows by ≤ 10 %
 * from N = 1 to N = 4.
 */
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import type { KubeObject } from '../../src/runtime/index.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { startCountingProxy } from '../../test/support/counting-proxy.ts';
import { ROOT_USER, startDragonfly } from '../../test/support/dragonfly.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startMinIO } from '../../test/support/minio.ts';
import { buildLargeModelArchive, buildModelArchive } from '../../test/support/model-archive.ts';
import { startModelServerFleet, type ModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import { GVR, benchClient, isReady, newNamespace, watchObjects } from '../lib/kube.ts';
import { progress, stat, until, type Row } from '../lib/report.ts';

const NS = [1, 2, 4] as const;
const MODES = ['nodes', 'seeds', 'direct'] as const;
type Mode = (typeof MODES)[number];
const BUCKET = 'bench8';

export interface S8Options {
  reps: number;
  sizeBytes: number;
}

interface Run {
  mode: Mode;
  n: number;
  rep: number;
  /** create → all Ready, ms. */
  readyMs: number;
  /** The preheat job's end (its ModelPreheat SUCCESS seen) → all Ready, ms; undefined without a preheat. */
  afterPreheatMs?: number;
  localHits: number;
  originBytes: number;
  /** Why a replica was or was not a local hit: its status, and the preheat's per-peer outcome. */
  replicas?: { nodeIP?: string; localHit?: boolean; phase?: string; message?: string }[];
  preheatPeers?: unknown;
}

export async function scenario8(cp: ControlPlane, o: S8Options): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench8-'));
  cleanup.push(() => rm(work, { recursive: true, force: true }));
  try {
    progress('s8: starting Dragonfly (manager, scheduler, seed peer, 4 node peers) and MinIO');
    const network = await startDragonfly({ nodePeers: 4 });
    cleanup.push(() => network.stop());
    const minio = await startMinIO();
    cleanup.push(() => minio.stop());
    await minio.createBucket(BUCKET);
    const origin = await startCountingProxy(minio.endpoint);
    cleanup.push(() => origin.close());
    const base = await buildModelArchive(work, { modelName: 'bench8-base' });
    const archive = await buildLargeModelArchive(base, work, 'bench8', o.sizeBytes);
    const bytes = await readFile(archive.path);
    const location = { ...minio.location(BUCKET), endpoint: origin.url };
    const keys: string[] = [];
    for (let rep = 0; rep < o.reps; rep++)
      for (const mode of MODES) for (const n of NS) keys.push(`${mode}-${n}-${rep}.mar`);
    const signed = new Map<string, string>();
    for (const key of keys) {
      await minio.putObject(BUCKET, key, bytes);
      signed.set(
        key,
        (await signObjectURL(location, key, minio.credentials(), { expiresSeconds: 7200 })).url,
      );
    }
    const objectURL = (fileName: string) => signed.get(fileName)!;
    // One replica per node through its peer, and one per node straight to the origin (direct).
    const viaPeer: ModelServerFleet[] = [];
    const direct: ModelServerFleet[] = [];
    for (const peer of network.peers) {
      const f = await startModelServerFleet(1, { proxyURL: peer.proxyURL, objectURL, workerStartMs: 50 });
      const d = await startModelServerFleet(1, { objectURL, workerStartMs: 50 });
      cleanup.push(
        () => f.close(),
        () => d.close(),
      );
      viaPeer.push(f);
      direct.push(d);
    }

    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench8');
    for (const [i, peer] of network.peers.entries())
      await ServiceEndpoints.createNode(kc, `${ns}-node-${i}`, peer.ip);
    const secret = (name: string, stringData: Record<string, string>) =>
      kube.resource(GVR.secrets).create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name, namespace: ns },
        stringData,
      } as KubeObject);
    await secret('s3', { access_key: minio.accessKey, secret_key: minio.secretKey });
    await secret('manager', { username: ROOT_USER.name, password: ROOT_USER.password });
    // A Service per (mode, N): N replicas on nodes 0..N-1.
    for (const mode of MODES)
      for (const n of NS) {
        const svc = new ServiceEndpoints(kc, ns, `${mode}-${n}`);
        for (let i = 0; i < n; i++)
          await svc.add(
            `${mode}-${n}-${i}`,
            (mode === 'direct' ? direct : viaPeer)[i]!.urls[0]!,
            true,
            `${ns}-node-${i}`,
          );
      }
    const operator = await startManager(
      kc,
      [
        '--no-leader-elect',
        '--namespace',
        ns,
        '--manager-url',
        network.managerURL,
        // The ServedModels' preheat.manager names the manager by URL, with its sign-in Secret (refused unless allowed).
        '--allowed-manager-hosts',
        '127.0.0.1',
        '--poll-backoff-start',
        '500ms',
        '--poll-backoff-max',
        '2s',
      ],
      [
        modelPreheatController,
        (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() }),
      ],
    );
    cleanup.push(() => operator.stop());

    const ready = new Map<string, number>();
    const preheated = new Map<string, number>();
    const smWatch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
      if (!ready.has(obj.metadata.name) && isReady(obj)) ready.set(obj.metadata.name, at);
    });
    const mphWatch = watchObjects<ModelPreheat>(kube, GVR.modelPreheats, ns, (_t, obj, at) => {
      if (!preheated.has(obj.metadata.name) && obj.status?.state === 'SUCCESS')
        preheated.set(obj.metadata.name, at);
    });
    cleanup.push(
      async () => smWatch.stop(),
      async () => mphWatch.stop(),
    );
    await smWatch.ready;
    await mphWatch.ready;

    const runs: Run[] = [];
    for (let rep = 0; rep < o.reps; rep++)
      for (const n of NS)
        for (const mode of MODES) {
          const name = `${mode}-${n}-${rep}`;
          const key = `${name}.mar`;
          const bytesBefore = origin.bytesServed(key);
          const started = performance.now();
          await kube.resource(GVR.servedModels).create({
            apiVersion: 'peerload.io/v1alpha1',
            kind: 'ServedModel',
            metadata: { name, namespace: ns },
            spec: {
              modelName: name,
              fileName: key,
              modelServer: { service: { name: `${mode}-${n}` } },
              ...(mode === 'direct'
                ? {}
                : {
                    preheat: {
                      create: true,
                      objectStorage: { ...location, credentialsSecretRef: { name: 's3' } },
                      manager: { url: network.managerURL, signInSecretRef: { name: 'manager' } },
                      ...(mode === 'seeds' ? { scope: 'single_seed_peer' } : {}),
                    },
                  }),
            },
          } as KubeObject);
          await until(`${name} Ready`, 600_000, () => ready.has(name));
          const sm = (await kube.resource<ServedModel>(GVR.servedModels).get(ns, name)) as ServedModel;
          const localHits = (sm.status?.replicas ?? []).filter((r) => r.localHit === true).length;
          const mph =
            mode === 'direct'
              ? undefined
              : ((await kube
                  .resource<ModelPreheat>(GVR.modelPreheats)
                  .get(ns, `${name}-preheat`)) as ModelPreheat);
          const readyAt = ready.get(name)!;
          const preheatAt = preheated.get(`${name}-preheat`);
          const r: Run = {
            mode,
            n,
            rep,
            readyMs: readyAt - started,
            ...(preheatAt !== undefined ? { afterPreheatMs: readyAt - preheatAt } : {}),
            localHits,
            originBytes: origin.bytesServed(key) - bytesBefore,
            replicas: (sm.status?.replicas ?? []).map((x) => ({
              ...(x.nodeIP !== undefined ? { nodeIP: x.nodeIP } : {}),
              ...(x.localHit !== undefined ? { localHit: x.localHit } : {}),
              ...(x.phase !== undefined ? { phase: x.phase } : {}),
              ...(x.message !== undefined ? { message: x.message } : {}),
            })),
            ...(mph ? { preheatPeers: mph.status?.peers } : {}),
          };
          runs.push(r);
          progress(`s8 ${JSON.stringify(r)}`);
        }

    const of = (mode: Mode, n: number) => runs.filter((r) => r.mode === mode && r.n === n);
    const seconds = (rs: Run[], pick: (r: Run) => number | undefined) =>
      stat(rs.map((r) => (pick(r) ?? NaN) / 1000));
    const rows: Row[] = [];
    for (const n of NS) {
      const nodes = of('nodes', n);
      rows.push({
        id: `8${'abc'[NS.indexOf(n)]}`,
        scenario: `8 node-targeted preheat, ${n} replica(s) on ${n} node peer(s), real network`,
        metric: 'create → all Ready (nodes), vs seed-peer preheat',
        unit: 's',
        value: seconds(nodes, (r) => r.readyMs),
        reference: seconds(of('seeds', n), (r) => r.readyMs),
        referenceLabel: '(seeds)',
        target: 'informational',
        notes:
          `local hits ${nodes.map((r) => `${r.localHits}/${n}`).join(', ')}; after the preheat job: nodes ` +
          `${seconds(nodes, (r) => r.afterPreheatMs).median.toFixed(2)} s, seeds ${seconds(of('seeds', n), (r) => r.afterPreheatMs).median.toFixed(2)} s; ` +
          `direct (no preheat) ${seconds(of('direct', n), (r) => r.readyMs).median.toFixed(2)} s; origin bytes per run (nodes) ` +
          `${nodes.map((r) => r.originBytes).join(', ')} of ${o.sizeBytes}`,
      });
    }
    const growth = (pick: (r: Run) => number | undefined) =>
      stat(
        Array.from({ length: o.reps }, (_, rep) => {
          const one = runs.find((r) => r.mode === 'nodes' && r.n === 1 && r.rep === rep);
          const four = runs.find((r) => r.mode === 'nodes' && r.n === 4 && r.rep === rep);
          return one && four ? (pick(four) ?? NaN) / (pick(one) ?? NaN) : NaN;
        }),
      );
    const allLocal =
      of('nodes', 4).every((r) => r.localHits === 4) && of('nodes', 2).every((r) => r.localHits === 2);
    const g = growth((r) => r.readyMs);
    rows.push({
      id: '8d',
      scenario: '8 node-targeted preheat: N = 4 vs N = 1 (the moonshot)',
      metric: 'create → all Ready, N = 4 / N = 1, every download a local hit',
      unit: 'x',
      value: g,
      target: '≤ 1.10x and all local hits',
      pass: g.median <= 1.1 && allLocal,
      notes: `after the preheat job: N = 4 / N = 1 = ${growth((r) => r.afterPreheatMs).median.toFixed(2)}x; all local hits: ${allLocal}`,
    });
    return { rows, raw: { runs, sizeBytes: o.sizeBytes } };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
