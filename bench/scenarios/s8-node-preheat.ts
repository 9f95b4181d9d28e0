/**
 * Scenario 8 (node-targeted preheat, on the REAL Dragonfly network: manager and scheduler v2.5.1, dfdaemon 1.4.2 as
 * a seed peer and 4 node peers on their own 127.0.0.x addresses, MinIO as the origin): one model of `sizeBytes` to
 * N = 1, 2, 4 replicas, one per node (a Node whose InternalIP is that peer's address, named by the EndpointSlice's
 * nodeName), each an emulated model server downloading through its own node's peer (or straight from the origin).
 * Measured: the ServedModel's create → all replicas Ready, for
 *   - nodes:  preheat.create with node targeting (scope all_peers, the replicas' nodes): a replica's gate opens
 *             once its node's job is created, and its download joins the task the preheat runs on that peer;
 *   - direct: no preheat, every replica downloads from the origin itself (info: what N replicas cost without P2P);
 *   - t1:     no preheat, one replica downloads through its node's peer, cold (node peer → seed peer → origin): one
 *             cold download through one node peer, the floor the target is set against (on one machine every peer
 *             writes to the same disk, so the direct download is not it).
 * Every run uses an object of its own, so no cache carries over. A download is a P2P hit when its node's daemon
 * did not go back to the origin for the task (the daemon's log); the origin's bytes are counted by a proxy.
 * After each repetition, scale-out: a ServedModel Ready on one node gets a pod on another.
 * Target ("one download"): all Ready for N = 1, 2, 4 ≤ max(1.5× t1, t1 + 5 s), N = 4 / N = 1 ≤ 1.1×, the origin ≤ 1.05× the size
 * (plus the daemons' probes), every download a P2P hit; the scaled-out pod Ready ≤ t1 + 5 s after it is up.
 */
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { rm } from 'node:fs/promises';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startModelServerFleet, type ModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { settleDisk } from '../lib/disk.ts';
import { GVR, benchClient, createServedModel, newNamespace } from '../lib/kube.ts';
import {
  backToSource,
  createNodesAndSecrets,
  dropObjects,
  type RealNetRun,
  startOperator,
  startRealNetWithArchive,
  untilReadyOn,
  watchReadiness,
} from '../lib/realnet.ts';
import { progress, stat, until, type Row } from '../lib/report.ts';

const NS = [1, 2, 4] as const;
const MODES = ['nodes', 'direct'] as const;
/** `peer`: t1, one cold download through one node peer without a preheat (N = 1 only). */
type Mode = (typeof MODES)[number] | 'peer';
const FLOOR_KEY = 'floor.mar';
const run = promisify(execFile);

export interface S8Options {
  reps: number;
  sizeBytes: number;
}

interface Run extends RealNetRun<Mode> {
  localHits: number;
  /** Each replica's status, and the preheat's per-peer outcome. */
  replicas?: { nodeIP?: string; localHit?: boolean; phase?: string; message?: string }[];
  preheatPeers?: unknown;
}

interface ScaleOut {
  rep: number;
  /** The new pod's EndpointSlice added (ready) → the ServedModel Ready on both replicas, ms. */
  readyMs: number;
  p2pHit: boolean;
  originBytes: number;
}

export async function scenario8(cp: ControlPlane, o: S8Options): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    const net = await startRealNetWithArchive(cleanup, 8, 4, o.sizeBytes);
    const { network, minio, origin, bytes, location } = net;
    const keys: string[] = [FLOOR_KEY];
    for (let rep = 0; rep < o.reps; rep++)
      for (const key of [
        ...MODES.flatMap((m) => NS.map((n) => `${m}-${n}-${rep}`)),
        `peer-1-${rep}`,
        `scale-${rep}`,
      ])
        keys.push(`${key}.mar`);
    const signed = new Map<string, string>();
    for (const key of keys) {
      await minio.putObject(net.bucket, key, bytes);
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
      // As the plugin: the tag the storage credentials give (the owned preheat's).
      const tag = credentialTag(location, minio.credentials());
      const f = await startModelServerFleet(1, {
        proxyURL: peer.proxyURL,
        objectURL,
        tag,
        workerStartMs: 50,
      });
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
    await createNodesAndSecrets(kc, kube, ns, net);
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
    // t1's Service: one replica on node 0, through its node's peer.
    await new ServiceEndpoints(kc, ns, 'peer-1').add('peer-1-0', viaPeer[0]!.urls[0]!, true, `${ns}-node-0`);
    await startOperator(cleanup, kc, ns, net, loopbackDispatcher());
    const readiness = await watchReadiness(cleanup, kube, ns);
    const { ready, preheated } = readiness;

    const runs: Run[] = [];
    const scaleOuts: ScaleOut[] = [];
    /** Per N, per repetition: one fetch of the object written N + 1 times on this disk (writtenTimes), ms. */
    const floors = new Map<number, number[]>(NS.map((n) => [n, []]));
    /**
     * The least node targeting must do for N replicas on ONE machine: fetch the object once and write it N + 1
     * times (the seed peer's file and each node peer's), all on the one disk they share here; on a cluster each
     * node writes to its own. curl from the origin piped through tee into the peers' storage directories.
     */
    const writtenTimes = async (copies: number): Promise<number> => {
      const dsts = [network.seedPeer!, ...network.peers.slice(0, copies - 1)].map((p) =>
        join(p.storageDir, '.bench-copy'),
      );
      settleDisk();
      const t0 = performance.now();
      await run(
        'bash',
        [
          '-c',
          'set -o pipefail; curl -sS --fail "$1" | tee "${@:3}" > "$2"',
          'copies',
          objectURL(FLOOR_KEY),
          ...dsts,
        ],
        { timeout: 600_000 },
      );
      const ms = performance.now() - t0;
      for (const d of dsts) await rm(d);
      return ms;
    };
    const smClient = kube.resource<ServedModel>(GVR.servedModels);
    const spec = (name: string, service: string, mode: Mode) => ({
      modelName: name,
      fileName: `${name}.mar`,
      modelServer: { service: { name: service } },
      ...(mode !== 'nodes'
        ? {}
        : {
            preheat: {
              create: true,
              objectStorage: { ...location, credentialsSecretRef: { name: 's3' } },
              manager: { url: network.managerURL, signInSecretRef: { name: 'manager' } },
            },
          }),
    });
    const create = (name: string, service: string, mode: Mode) =>
      createServedModel(kube, ns, name, spec(name, service, mode));
    const dropObject = (key: string) => dropObjects(net, net.bucket, [key]);
    /** Whether node peer `i`'s daemon went back to the origin for the task of `preheatName`'s first object. */
    const wentBack = async (i: number, preheatName: string) => {
      const mph = (await kube.resource<ModelPreheat>(GVR.modelPreheats).get(ns, preheatName)) as ModelPreheat;
      return backToSource(await network.peers[i]!.logs(), mph.status?.tasks?.[0]?.taskID);
    };
    /** A repetition's runs: each N in both modes (sides alternating), and t1 first or last. */
    const casesOf = (rep: number): [Mode, number][] => {
      const modes = rep % 2 === 0 ? MODES : [...MODES].reverse();
      const grid = NS.flatMap((n) => modes.map((mode): [Mode, number] => [mode, n]));
      return rep % 2 === 0 ? [['peer', 1], ...grid] : [...grid, ['peer', 1]];
    };
    for (let rep = 0; rep < o.reps; rep++) {
      for (const [mode, n] of casesOf(rep)) {
        const name = `${mode}-${n}-${rep}`;
        const key = `${name}.mar`;
        const bytesBefore = origin.bytesServed(key);
        const started = performance.now();
        await create(name, `${mode}-${n}`, mode);
        await until(`${name} Ready`, 600_000, () => ready.has(name));
        const sm = (await smClient.get(ns, name)) as ServedModel;
        const localHits = (sm.status?.replicas ?? []).filter((r) => r.localHit === true).length;
        const preheatName = `${name}-preheat`;
        const mph =
          mode !== 'nodes'
            ? undefined
            : ((await kube.resource<ModelPreheat>(GVR.modelPreheats).get(ns, preheatName)) as ModelPreheat);
        let p2pHits: number | undefined;
        if (mode === 'nodes') {
          p2pHits = 0;
          for (let i = 0; i < n; i++) if (!(await wentBack(i, preheatName))) p2pHits++;
        }
        const readyAt = ready.get(name)!;
        const preheatAt = preheated.get(preheatName);
        const r: Run = {
          mode,
          n,
          rep,
          readyMs: readyAt - started,
          ...(preheatAt !== undefined ? { jobEndMs: preheatAt - started } : {}),
          localHits,
          ...(p2pHits !== undefined ? { p2pHits } : {}),
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
        // Its model off the shared model servers before the next run (a Service's next ServedModel), and its
        // object out of MinIO (1 GiB objects fill a shared disk).
        await smClient.delete(ns, name).catch(() => undefined);
        await dropObject(key);
      }
      for (const n of NS) floors.get(n)!.push(await writtenTimes(n + 1));
      scaleOuts.push(await scaleOut(rep));
    }

    /**
     * Scale-out: a ServedModel Ready on node 0, then a pod on node 1 (added ready, its model server up): the time
     * from the pod's EndpointSlice to the ServedModel Ready on both.
     */
    async function scaleOut(rep: number): Promise<ScaleOut> {
      const name = `scale-${rep}`;
      const svc = new ServiceEndpoints(kc, ns, name);
      await svc.add(`${name}-0`, viaPeer[0]!.urls[0]!, true, `${ns}-node-0`);
      await create(name, name, 'nodes');
      await until(`${name} Ready`, 600_000, () => ready.has(name));
      const before = origin.bytesServed(`${name}.mar`);
      const t0 = performance.now();
      await svc.add(`${name}-1`, viaPeer[1]!.urls[0]!, true, `${ns}-node-1`);
      const readyAt = await untilReadyOn(readiness, name, 2);
      const out = {
        rep,
        readyMs: readyAt - t0,
        p2pHit: !(await wentBack(1, `${name}-preheat`)),
        originBytes: origin.bytesServed(`${name}.mar`) - before,
      };
      progress(`s8 scale-out ${JSON.stringify(out)}`);
      await smClient.delete(ns, name).catch(() => undefined);
      await dropObject(`${name}.mar`);
      return out;
    }

    const of = (mode: Mode, n: number) => runs.filter((r) => r.mode === mode && r.n === n);
    const seconds = (rs: Run[], pick: (r: Run) => number | undefined) =>
      stat(rs.map((r) => (pick(r) ?? NaN) / 1000));
    /** Per repetition: `f` of the ready times of runs `a` and `b` of that repetition (NaN where one is missing). */
    const perRep = (a: [Mode, number], b: [Mode, number], f: (x: number, y: number) => number) =>
      stat(
        Array.from({ length: o.reps }, (_, rep) => {
          const find = ([mode, n]: [Mode, number]) =>
            runs.find((r) => r.mode === mode && r.n === n && r.rep === rep);
          const [x, y] = [find(a), find(b)];
          return x && y ? f(x.readyMs, y.readyMs) : NaN;
        }),
      );
    /** The nodes mode's time over t1 (one cold download through one node peer, same repetition). */
    const overT1 = (n: number) => perRep(['nodes', n], ['peer', 1], (t, t1) => t / t1);
    /** The nodes mode's time over its "one download" budget, max(1.5 × t1, t1 + 5 s). */
    const overBudget = (n: number) =>
      perRep(['nodes', n], ['peer', 1], (t, t1) => t / Math.max(1.5 * t1, t1 + 5000));
    const originOK = (r: Run) => r.originBytes <= o.sizeBytes * 1.05 + 16 * 1024;
    const rows: Row[] = [];
    for (const n of NS) {
      const nodes = of('nodes', n);
      const ratio = overT1(n);
      const budget = overBudget(n);
      const hits = nodes.every((r) => r.p2pHits === n);
      rows.push({
        id: `8${'abc'[NS.indexOf(n)]}`,
        scenario: `8 node-targeted preheat, ${n} replica(s) on ${n} node peer(s), real network`,
        metric: 'create → all Ready (nodes), vs t1 (one cold download through one node peer)',
        unit: 's',
        value: seconds(nodes, (r) => r.readyMs),
        reference: seconds(of('peer', 1), (r) => r.readyMs),
        referenceLabel: '(t1: one cold download through one node peer, no preheat)',
        ratio,
        target: '"one download": ≤ max(1.5× t1, t1 + 5 s), origin ≤ 1.05× size, every download a P2P hit',
        pass: budget.median <= 1 && hits && nodes.every(originOK),
        notes:
          `time / that budget ${budget.median.toFixed(2)} [${budget.min.toFixed(2)}–${budget.max.toFixed(2)}]; ` +
          `one fetch written ${n + 1} times on this disk (the seed's and each node's file: node targeting's floor on one machine) ` +
          `${stat(floors.get(n)!.map((x) => x / 1000)).median.toFixed(2)} s, nodes / that ` +
          `${stat(nodes.map((r) => r.readyMs / floors.get(n)![r.rep]!)).median.toFixed(2)}×; P2P hits ${nodes.map((r) => `${r.p2pHits}/${n}`).join(', ')}, local hits ${nodes.map((r) => `${r.localHits}/${n}`).join(', ')}; ` +
          `direct from the origin (no peer): N = 1 ${seconds(of('direct', 1), (r) => r.readyMs).median.toFixed(2)} s, N = ${n} ${seconds(of('direct', n), (r) => r.readyMs).median.toFixed(2)} s; origin bytes per run (nodes) ` +
          `${nodes.map((r) => r.originBytes).join(', ')} of ${o.sizeBytes}`,
      });
    }
    const growth = perRep(['nodes', 4], ['nodes', 1], (four, one) => four / one);
    const directGrowth = perRep(['direct', 4], ['direct', 1], (four, one) => four / one);
    const allHits = runs.filter((r) => r.mode === 'nodes').every((r) => r.p2pHits === r.n);
    rows.push({
      id: '8d',
      scenario: '8 node-targeted preheat: N = 4 vs N = 1',
      metric: 'create → all Ready, N = 4 / N = 1, every download a P2P hit',
      unit: 'x',
      value: growth,
      target: '≤ 1.10x and all P2P hits',
      pass: growth.median <= 1.1 && allHits,
      notes:
        `all P2P hits: ${allHits}; on this machine without P2P: direct N = 4 / N = 1 ${directGrowth.median.toFixed(2)}× ` +
        `(four replicas each fetching from the origin at once); the floor's own growth on this disk (written 5 times / twice): ` +
        `${stat(floors.get(4)!.map((x, i) => x / floors.get(1)![i]!)).median.toFixed(2)}×`,
    });
    const t1 = seconds(of('peer', 1), (r) => r.readyMs);
    const scale = stat(scaleOuts.map((x) => x.readyMs / 1000));
    rows.push({
      id: '8e',
      scenario: '8 scale-out: a pod on a new node, its model server up',
      metric: 'pod ready → ServedModel Ready on it',
      unit: 's',
      value: scale,
      reference: t1,
      referenceLabel: '(t1)',
      target: '≤ t1 + 5 s, a P2P hit',
      pass: scale.median <= t1.median + 5 && scaleOuts.every((x) => x.p2pHit),
      notes: `P2P hits ${scaleOuts.filter((x) => x.p2pHit).length}/${scaleOuts.length}; origin bytes ${scaleOuts.map((x) => x.originBytes).join(', ')}`,
    });
    return { rows, raw: { runs, scaleOuts, floors: Object.fromEntries(floors), sizeBytes: o.sizeBytes } };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
