/**
 * Scenario 13 (a seed-peer preheat without node targeting, on the REAL Dragonfly network: manager and scheduler
 * v2.5.1, dfdaemon 1.4.2 as a seed peer and 2 node peers on their own 127.0.0.x addresses, MinIO as the origin):
 * row 8 without node targeting. One model of `sizeBytes` to N = 1, 2 replicas named as static endpoints (no Node to
 * target), each an emulated model server downloading through its own node peer. Measured: the ServedModel's create
 * → all replicas Ready, for
 *   - seed: preheat.create with scope single_seed_peer: the replicas' gate opens once the owned preheat's job is
 *           underway, and each download joins the task the job runs on the seed peer;
 *   - t1:   no preheat, one replica downloading through its node's peer, cold (node peer → seed peer → origin), as
 *           row 8 defines it.
 * Every run uses an object of its own. A download is a P2P hit when its node's daemon did not go back to the origin
 * for the task (the daemon's log); the origin's bytes are counted by a proxy.
 * Target ("one download"): all Ready ≤ max(1.5× t1, t1 + 5 s), the origin ≤ 1.05× the size.
 */
import { credentialTag } from '../../src/storage/credential-tag.ts';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { GVR, benchClient, createServedModel, newNamespace } from '../lib/kube.ts';
import {
  backToSource,
  createNodesAndSecrets,
  dropObjects,
  type RealNetRun,
  startOperator,
  startRealNetWithArchive,
  watchReadiness,
} from '../lib/realnet.ts';
import { progress, stat, until, type Row } from '../lib/report.ts';

const NS = [1, 2] as const;
type Mode = 'seed' | 'peer';

export interface S13Options {
  reps: number;
  sizeBytes: number;
}

type Run = RealNetRun<Mode>;

export async function scenario13(cp: ControlPlane, o: S13Options): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    const net = await startRealNetWithArchive(cleanup, 13, 2, o.sizeBytes);
    const { network, minio, origin, bytes, location } = net;
    const signed = new Map<string, string>();
    const objectURL = (fileName: string) => signed.get(fileName)!;
    // One replica per node peer, named by its URL only (static endpoints).
    const fleet = await startModelServerFleet(network.peers.length, (i) => ({
      proxyURL: network.peers[i]!.proxyURL,
      objectURL,
      // As the plugin: the tag the storage credentials give (the owned preheat's).
      tag: credentialTag(location, minio.credentials()),
      workerStartMs: 50,
    }));
    cleanup.push(() => fleet.close());

    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench13');
    await createNodesAndSecrets(kc, kube, ns, net);
    await startOperator(cleanup, kc, ns, net, loopbackDispatcher(), [
      // Static endpoints on this machine (refused unless allowed).
      '--allowed-endpoint-hosts',
      '127.0.0.1',
    ]);
    const { ready, preheated } = await watchReadiness(cleanup, kube, ns);
    const smClient = kube.resource<ServedModel>(GVR.servedModels);
    const spec = (name: string, n: number, mode: Mode) => ({
      modelName: name,
      fileName: `${name}.mar`,
      modelServer: { endpoints: fleet.urls.slice(0, n) },
      ...(mode === 'peer'
        ? {}
        : {
            preheat: {
              create: true,
              scope: 'single_seed_peer',
              objectStorage: { ...location, credentialsSecretRef: { name: 's3' } },
              manager: { url: network.managerURL, signInSecretRef: { name: 'manager' } },
            },
          }),
    });

    const runs: Run[] = [];
    for (let rep = 0; rep < o.reps; rep++) {
      const grid: [Mode, number][] = NS.map((n) => ['seed', n]);
      // t1 first or last, alternating between repetitions.
      const cases: [Mode, number][] = rep % 2 === 0 ? [['peer', 1], ...grid] : [...grid, ['peer', 1]];
      for (const [mode, n] of cases) {
        const name = `${mode}-${n}-${rep}`;
        const key = `${name}.mar`;
        await minio.putObject(net.bucket, key, bytes);
        signed.set(
          key,
          (await signObjectURL(location, key, minio.credentials(), { expiresSeconds: 7200 })).url,
        );
        const bytesBefore = origin.bytesServed(key);
        const started = performance.now();
        await createServedModel(kube, ns, name, spec(name, n, mode));
        await until(`${name} Ready`, 600_000, () => ready.has(name));
        let p2pHits: number | undefined;
        if (mode === 'seed') {
          const mph = (await kube
            .resource<ModelPreheat>(GVR.modelPreheats)
            .get(ns, `${name}-preheat`)) as ModelPreheat;
          const taskID = mph.status?.tasks?.[0]?.taskID;
          p2pHits = 0;
          for (const peer of network.peers.slice(0, n))
            if (!backToSource(await peer.logs(), taskID)) p2pHits++;
        }
        const preheatAt = preheated.get(`${name}-preheat`);
        const r: Run = {
          mode,
          n,
          rep,
          readyMs: ready.get(name)! - started,
          ...(preheatAt !== undefined ? { jobEndMs: preheatAt - started } : {}),
          ...(p2pHits !== undefined ? { p2pHits } : {}),
          originBytes: origin.bytesServed(key) - bytesBefore,
        };
        runs.push(r);
        progress(`s13 ${JSON.stringify(r)}`);
        await smClient.delete(ns, name).catch(() => undefined);
        await dropObjects(net, net.bucket, [key]);
      }
    }

    const of = (mode: Mode, n: number) => runs.filter((r) => r.mode === mode && r.n === n);
    const t1Of = (rep: number) => runs.find((r) => r.mode === 'peer' && r.rep === rep)?.readyMs ?? NaN;
    const t1 = stat(of('peer', 1).map((r) => r.readyMs / 1000));
    const originOK = (r: Run) => r.originBytes <= o.sizeBytes * 1.05 + 16 * 1024;
    const rows: Row[] = NS.map((n, i) => {
      const seed = of('seed', n);
      const budget = stat(seed.map((r) => r.readyMs / Math.max(1.5 * t1Of(r.rep), t1Of(r.rep) + 5000)));
      return {
        id: `13${'ab'[i]}`,
        scenario: `13 seed-peer preheat, static endpoints, ${n} replica(s) on ${n} node peer(s), real network`,
        metric: 'create → all Ready (seed), vs t1 (one cold download through one node peer)',
        unit: 's',
        value: stat(seed.map((r) => r.readyMs / 1000)),
        reference: t1,
        referenceLabel: '(t1: one cold download through one node peer, no preheat)',
        ratio: stat(seed.map((r) => r.readyMs / t1Of(r.rep))),
        target: '"one download": ≤ max(1.5× t1, t1 + 5 s), origin ≤ 1.05× size',
        pass: budget.median <= 1 && seed.every(originOK),
        notes:
          `time / that budget ${budget.median.toFixed(2)} [${budget.min.toFixed(2)}–${budget.max.toFixed(2)}]; ` +
          `P2P hits ${seed.map((r) => `${r.p2pHits}/${n}`).join(', ')}; the job's SUCCESS seen ` +
          `${seed.map((r) => (r.jobEndMs === undefined ? 'after Ready' : `${(r.jobEndMs / 1000).toFixed(1)} s`)).join(', ')} after the create; ` +
          `origin bytes per run ${seed.map((r) => r.originBytes).join(', ')} of ${o.sizeBytes}`,
      };
    });
    return { rows, raw: { runs, sizeBytes: o.sizeBytes } };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
