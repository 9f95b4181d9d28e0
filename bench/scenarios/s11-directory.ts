/**
 * Scenario 11 (a model as a directory through `peerload agent`, on the REAL Dragonfly network: manager and
 * scheduler v2.5.1, dfdaemon 1.4.2 as a seed peer and 4 node peers on their own 127.0.0.x addresses, MinIO behind a
 * counting proxy): a model of `sizeBytes` in 8 shards, plus the two small files its server needs, to N = 1, 2, 4
 * replicas, one per node. Each replica is a real Triton (python backend: its model.py reads one small file, never
 * the shards) with a real agent beside it on its node peer's address; the agent hard-links the daemon's copy into
 * the model repository on a local hit. Per repetition and N, on objects of their own (a fresh prefix per run):
 *   - p2p:    a ServedModel (driver triton, files by prefix, node-targeted preheat): create → all replicas Ready,
 *             the origin's bytes, each replica's local hits and each shard's P2P hit on each node (the daemon's log);
 *   - direct: the reference, the same files straight from the origin into each replica's directory, every file of
 *             every replica at once, then each Triton loads the model: start → all loaded.
 * After the N = 4 run, 11d: a second ServedModel of the same files on the 4 replicas, now in every node peer's cache
 * (local hits): the agent's placement (its own start → end) against reading the same 8 shards from disk with the
 * page cache evicted.
 * Target: origin ≤ 1.05× the shards (plus the small files and probes), every shard a P2P hit on every node; 11d the
 * 8 shards hard-linked on every replica, ≥ 10× faster than the cold read.
 */
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Agent, request } from 'undici';
import type { FileProgress, VersionProgress } from '../../src/place/placer.ts';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY } from '../../test/support/oip-exchanges.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from '../../test/support/oip-replicas.ts';
import { startTriton } from '../../test/support/oip-servers.ts';
import { evictFromPageCache, settleDisk } from '../lib/disk.ts';
import { GVR, benchClient, createServedModel, deleteServedModelAndWait, newNamespace } from '../lib/kube.ts';
import * as realnet from '../lib/realnet.ts';
import { progress, stat, until, type Row } from '../lib/report.ts';

const BUCKET = 'bench11';
const NS = [1, 2, 4] as const;
const MODES = ['p2p', 'direct'] as const;
type Mode = (typeof MODES)[number];
const SHARDS = 8;
const VERSION = '1';
const TOKEN = 'bench11-agent-token-0123456789abcdef';
const SMALL: Record<string, string> = { 'model.py': ECHO_MODEL_PY, 'offset.json': '{"offset": 1}' };
const shardName = (i: number) => `shard-${String(i + 1).padStart(2, '0')}-of-${SHARDS}.bin`;
const SHARD_NAMES = Array.from({ length: SHARDS }, (_, i) => shardName(i));
const FILES = [...Object.keys(SMALL), ...SHARD_NAMES];

export interface S11Options {
  reps: number;
  /** The model's size: 8 shards of a 1/8th each. */
  sizeBytes: number;
}

interface AgentOutcome {
  node: number;
  /** When the agent was asked for the version (epoch ms). */
  startedAt: number;
  /** The agent's own start → end of the version's download, ms. */
  placeMs: number;
  localHits: number;
  hardLinks: number;
  shardHardLinks: number;
}

interface Run {
  mode: Mode;
  n: number;
  rep: number;
  /** p2p: create → all Ready; direct: start → the model loaded on every replica. ms. */
  readyMs: number;
  /** direct: start → every file on every replica, ms. */
  downloadMs?: number;
  /** p2p: create → the first agent asked for the version (the gate open), ms. */
  agentStartMs?: number;
  /** p2p: create → the preheat's SUCCESS seen, ms. */
  jobEndMs?: number;
  originBytes: number;
  shardOriginBytes: number;
  /** p2p: replicas whose status says local hit. */
  localHits?: number;
  /** p2p: (node, shard) pairs whose node's daemon did not go back to the origin, of n × 8. */
  shardP2PHits?: number;
  /** p2p: the preheat's task of each file. */
  taskIDs?: string[];
  agents?: AgentOutcome[];
}

interface Linked {
  rep: number;
  /** create → all 4 Ready, ms. */
  readyMs: number;
  agents: AgentOutcome[];
  /** The 8 shards read from disk, page cache evicted, all at once, ms. */
  coldReadMs: number;
}

/** Reads a file to its end, discarding it. */
const drain = (path: string) =>
  pipeline(createReadStream(path, { highWaterMark: 1 << 20 }), new Writable({ write: (_c, _e, cb) => cb() }));

function outcome(node: number, p: VersionProgress | undefined): AgentOutcome {
  const files: FileProgress[] = p?.files ?? [];
  return {
    node,
    startedAt: p ? Date.parse(p.startedAt) : NaN,
    placeMs: p?.finishedAt ? Date.parse(p.finishedAt) - Date.parse(p.startedAt) : NaN,
    localHits: p?.localHits ?? 0,
    hardLinks: p?.hardLinks ?? 0,
    shardHardLinks: files.filter((f) => SHARD_NAMES.includes(f.path) && f.hardLink === true).length,
  };
}

export async function scenario11(cp: ControlPlane, o: S11Options): Promise<{ rows: Row[]; raw: unknown }> {
  const shardBytes = Math.floor(o.sizeBytes / SHARDS);
  const shard = randomBytes(shardBytes);
  const runs: Run[] = [];
  const linkedRuns: Linked[] = [];
  for (let rep = 0; rep < o.reps; rep++) {
    const r = await repetition(cp, rep, shard);
    runs.push(...r.runs);
    linkedRuns.push(...r.linked);
  }
  return {
    rows: rowsOf(runs, linkedRuns, o, shardBytes),
    raw: { runs, linked: linkedRuns, sizeBytes: o.sizeBytes, shardBytes, loadavgAtEnd: loadavg() },
  };
}

/**
 * One repetition on a network, a MinIO and Tritons of its own. A daemon keeps a task's file open after it is
 * deleted, so only its exit gives the disk back: the copies of a repetition's runs (the seed peer's and each node
 * peer's, 2 GiB each) stay until its end, and N = 4 runs first, when the disk holds the fewest of them.
 */
async function repetition(
  cp: ControlPlane,
  rep: number,
  shard: Buffer,
): Promise<{ runs: Run[]; linked: Linked[] }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench11-'));
  cleanup.push(() => rm(work, { recursive: true, force: true }));
  try {
    progress(
      's11: starting Dragonfly (manager, scheduler, seed peer, 4 node peers), MinIO and 4 Tritons + agents',
    );
    const net = await realnet.startRealNet(cleanup, BUCKET, 4);
    const { network, minio, origin } = net;
    const location = { ...minio.location(BUCKET), endpoint: origin.url };

    const dispatcher = new Agent();
    cleanup.push(() => dispatcher.close());
    const agentPort = await portOnAll(network.peers.map((p) => p.ip));
    const replicas: AgentReplica[] = [];
    // serverUid: the uid a production Triton runs as (deploy/examples/triton-hardlink), so the agents keep their
    // hard links as they would there. This bench measures placement time; the Tritons here run as root, and the
    // safety of links against a writing server is tested in test/e2e/agent-real-p2p.test.ts.
    const common = {
      port: agentPort,
      token: TOKEN,
      credentials: minio,
      dispatcher,
      start: startTriton,
      serverUid: 1000,
    };
    for (const [i, peer] of network.peers.entries()) {
      const replica = await startAgentReplica({ ...common, peer, dir: join(work, `replica-${i}`) });
      cleanup.push(() => replica.stop());
      replicas.push(replica);
    }

    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench11');
    const nodes = await realnet.createNodesAndSecrets(kc, kube, ns, net, { 'agent-token': { token: TOKEN } });
    // A Service per N: replicas 0..N-1, each endpoint on its node.
    const services: ServiceEndpoints[] = [];
    for (const n of NS) {
      const svc = new ServiceEndpoints(kc, ns, `triton-${n}`);
      for (let i = 0; i < n; i++) await svc.add(`triton-${n}-${i}`, replicas[i]!.server.url, true, nodes[i]);
      services.push(svc);
    }
    // Slices hold 198.18.x addresses: the operator reaches each replica (server and agent) at its peer's address.
    const hostOf = (a: string) => services.map((s) => s.hostOf(a)).find((h) => h !== undefined);
    await realnet.startOperator(cleanup, kc, ns, net, loopbackDispatcher(hostOf));
    const readiness = await realnet.watchReadiness(cleanup, kube, ns);
    const { preheated } = readiness;
    const smClient = kube.resource<ServedModel>(GVR.servedModels);

    let uploads = 0;
    /** The model's files under `prefix`, each shard different (its first bytes). */
    const upload = async (prefix: string) => {
      for (const [p, body] of Object.entries(SMALL))
        await minio.putObject(BUCKET, `${prefix}${p}`, Buffer.from(body));
      for (const p of SHARD_NAMES) {
        shard.writeUInt32BE(rep * 1000 + uploads++, 0);
        await minio.putObject(BUCKET, `${prefix}${p}`, shard);
      }
    };
    const served = (prefix: string, files: readonly string[]) =>
      files.reduce((s, p) => s + origin.bytesServed(`/${BUCKET}/${prefix}${p}`), 0);
    /** Triton's config of model `name` beside its versions on replicas 0..n-1, as an init container puts it. */
    const writeConfig = async (name: string, n: number) => {
      for (const r of replicas.slice(0, n)) {
        await mkdir(join(r.root, name), { recursive: true });
        await writeFile(join(r.root, name, 'config.pbtxt'), ECHO_CONFIG_PBTXT);
      }
    };

    const create = (name: string, n: number, prefix: string) =>
      createServedModel(kube, ns, name, {
        modelName: name,
        version: VERSION,
        files: { prefix },
        modelServer: {
          driver: 'triton',
          service: { name: `triton-${n}` },
          agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
        },
        preheat: {
          create: true,
          objectStorage: { ...location, credentialsSecretRef: { name: 's3' } },
          manager: { url: network.managerURL, signInSecretRef: { name: 'manager' } },
        },
      });
    /** Creates the ServedModel and waits until it is Ready on all n replicas; create → Ready, ms. */
    const createAndWait = async (name: string, n: number, prefix: string) => {
      await writeConfig(name, n);
      const started = performance.now();
      const createdAt = Date.now();
      await create(name, n, prefix);
      return { started, createdAt, readyMs: (await realnet.untilReadyOn(readiness, name, n)) - started };
    };
    const agentsOf = (name: string, n: number) =>
      replicas.slice(0, n).map((r, i) => outcome(i, r.agent.versions.get(name)?.get(VERSION)));
    const tasksOf = async (name: string) => {
      const mph = (await kube
        .resource<ModelPreheat>(GVR.modelPreheats)
        .get(ns, `${name}-preheat`)) as ModelPreheat;
      return mph.status?.tasks ?? [];
    };

    async function p2p(n: number, rep: number, prefix: string, name: string): Promise<Run> {
      const before = { all: served(prefix, FILES), shards: served(prefix, SHARD_NAMES) };
      const { started, createdAt, readyMs } = await createAndWait(name, n, prefix);
      const sm = (await smClient.get(ns, name)) as ServedModel;
      await until(`${name}-preheat SUCCESS`, 300_000, () => preheated.has(`${name}-preheat`));
      const tasks = await tasksOf(name);
      const agents = agentsOf(name, n);
      const shardTasks = tasks.filter((t) =>
        SHARD_NAMES.some((p) => new URL(t.url).pathname.endsWith(`/${p}`)),
      );
      let shardP2PHits = 0;
      for (let i = 0; i < n; i++) {
        const log = await network.peers[i]!.logs();
        for (const t of shardTasks) if (!realnet.backToSource(log, t.taskID)) shardP2PHits++;
      }
      return {
        mode: 'p2p',
        n,
        rep,
        readyMs,
        agentStartMs: Math.min(...agents.map((a) => a.startedAt)) - createdAt,
        jobEndMs: preheated.get(`${name}-preheat`)! - started,
        originBytes: served(prefix, FILES) - before.all,
        shardOriginBytes: served(prefix, SHARD_NAMES) - before.shards,
        localHits: (sm.status?.replicas ?? []).filter((r) => r.localHit === true).length,
        shardP2PHits: shardTasks.length === SHARDS ? shardP2PHits : NaN,
        taskIDs: tasks.map((t) => t.taskID),
        agents,
      };
    }

    /** The reference: every file of every replica straight from the origin at once, then every Triton loads it. */
    async function direct(n: number, rep: number, prefix: string, name: string): Promise<Run> {
      await writeConfig(name, n);
      const urls = new Map<string, string>();
      for (const p of FILES)
        urls.set(
          p,
          (await signObjectURL(location, `${prefix}${p}`, minio.credentials(), { expiresSeconds: 3600 })).url,
        );
      const before = { all: served(prefix, FILES), shards: served(prefix, SHARD_NAMES) };
      const started = performance.now();
      await Promise.all(
        replicas.slice(0, n).flatMap((r) =>
          FILES.map(async (p) => {
            const dir = join(r.root, name, VERSION);
            await mkdir(dir, { recursive: true });
            const res = await request(urls.get(p)!);
            if (res.statusCode !== 200) throw new Error(`direct GET ${p}: HTTP ${res.statusCode}`);
            await pipeline(res.body, createWriteStream(join(dir, p)));
          }),
        ),
      );
      const downloaded = performance.now();
      await Promise.all(
        replicas.slice(0, n).map(async (r) => {
          const res = await request(`${r.server.url}/v2/repository/models/${name}/load`, {
            method: 'POST',
            body: '{}',
          });
          const text = await res.body.text();
          if (res.statusCode !== 200)
            throw new Error(`Triton load of ${name}: HTTP ${res.statusCode} ${text}`);
        }),
      );
      const loaded = performance.now();
      for (const r of replicas.slice(0, n)) {
        await request(`${r.server.url}/v2/repository/models/${name}/unload`, {
          method: 'POST',
          body: '{}',
        }).then((res) => res.body.text());
        await rm(join(r.root, name), { recursive: true, force: true });
      }
      return {
        mode: 'direct',
        n,
        rep,
        readyMs: loaded - started,
        downloadMs: downloaded - started,
        originBytes: served(prefix, FILES) - before.all,
        shardOriginBytes: served(prefix, SHARD_NAMES) - before.shards,
      };
    }

    /** 11d: the same files again on the 4 replicas, in every node peer's cache now. */
    async function linked(rep: number, prefix: string): Promise<Linked> {
      const name = `linked-${rep}`;
      settleDisk();
      const { readyMs } = await createAndWait(name, 4, prefix);
      const agents = agentsOf(name, 4);
      const files = SHARD_NAMES.map((p) => join(replicas[0]!.root, name, VERSION, p));
      for (const f of files) evictFromPageCache(f);
      const t0 = performance.now();
      await Promise.all(files.map(drain));
      const out = { rep, readyMs, agents, coldReadMs: performance.now() - t0 };
      await deleteServedModelAndWait(kube, ns, name);
      return out;
    }

    const runs: Run[] = [];
    const linkedRuns: Linked[] = [];
    for (const n of [...NS].reverse())
      for (const mode of rep % 2 === 0 ? MODES : [...MODES].reverse()) {
        const name = `${mode}-${n}-${rep}`;
        const prefix = `${name}/`;
        await upload(prefix);
        // The upload's and the previous run's dirty pages written back first, so no run is billed for its
        // predecessor's writes (a direct run at N = 4 leaves GiBs of them).
        settleDisk();
        const r = mode === 'p2p' ? await p2p(n, rep, prefix, name) : await direct(n, rep, prefix, name);
        runs.push(r);
        progress(`s11 ${JSON.stringify(r)}`);
        if (mode === 'p2p' && n === 4) {
          const l = await linked(rep, prefix);
          linkedRuns.push(l);
          progress(`s11 linked ${JSON.stringify(l)}`);
        }
        if (mode === 'p2p') await deleteServedModelAndWait(kube, ns, name);
        await realnet.dropObjects(
          net,
          BUCKET,
          FILES.map((p) => `${prefix}${p}`),
        );
      }
    return { runs, linked: linkedRuns };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').trim();

function rowsOf(runs: Run[], linkedRuns: Linked[], o: S11Options, shardBytes: number): Row[] {
  const shardsTotal = shardBytes * SHARDS;
  const of = (mode: Mode, n: number) => runs.filter((r) => r.mode === mode && r.n === n);
  const seconds = (xs: number[]) => stat(xs.map((x) => x / 1000));
  const paired = (n: number) =>
    stat(
      Array.from({ length: o.reps }, (_, rep) => {
        const p = runs.find((r) => r.mode === 'p2p' && r.n === n && r.rep === rep);
        const d = runs.find((r) => r.mode === 'direct' && r.n === n && r.rep === rep);
        return p && d ? p.readyMs / d.readyMs : NaN;
      }),
    );
  const MiBs = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  const rows: Row[] = NS.map((n, k) => {
    const p = of('p2p', n);
    const d = of('direct', n);
    const originOK = p.every((r) => r.shardOriginBytes <= shardsTotal * 1.05);
    const hits = p.every((r) => r.shardP2PHits === n * SHARDS);
    return {
      id: `11${'abc'[k]}`,
      scenario: `11 a ${MiBs(shardsTotal)} model of ${SHARDS} shards (directory) to ${n} replica(s) through the agent, real network`,
      metric:
        'create → all Ready (preheat to the nodes, real Triton + agent), vs a direct parallel download + load',
      unit: 's',
      value: seconds(p.map((r) => r.readyMs)),
      reference: seconds(d.map((r) => r.readyMs)),
      referenceLabel: '(direct, same N)',
      ratio: paired(n),
      target: 'origin ≤ 1.05× the shards, every shard a P2P hit on every node',
      pass: p.length > 0 && originOK && hits,
      notes:
        `origin (shards) per run ${p.map((r) => MiBs(r.shardOriginBytes)).join(', ')} of ${MiBs(shardsTotal)}` +
        ` (all files ${p.map((r) => r.originBytes).join(', ')} B; direct ${d.map((r) => MiBs(r.shardOriginBytes)).join(', ')}); ` +
        `shard P2P hits ${p.map((r) => `${r.shardP2PHits}/${n * SHARDS}`).join(', ')}; ` +
        `local hits (status) ${p.map((r) => `${r.localHits}/${n}`).join(', ')}; ` +
        `agents' hard links ${p.map((r) => r.agents!.map((a) => a.hardLinks).join('+')).join(', ')}; ` +
        `create → agents asked ${p.map((r) => ((r.agentStartMs ?? NaN) / 1000).toFixed(1)).join(', ')} s, ` +
        `agents' placement ${p.map((r) => r.agents!.map((a) => (a.placeMs / 1000).toFixed(1)).join('+')).join(', ')} s; ` +
        `preheat end ${p.map((r) => ((r.jobEndMs ?? NaN) / 1000).toFixed(1)).join(', ')} s; ` +
        `direct download only ${d.map((r) => ((r.downloadMs ?? NaN) / 1000).toFixed(1)).join(', ')} s`,
    };
  });
  const place = linkedRuns.flatMap((l) => l.agents.map((a) => a.placeMs));
  const linkRatio = stat(linkedRuns.map((l) => stat(l.agents.map((a) => a.placeMs)).median / l.coldReadMs));
  const allLinked =
    linkedRuns.length > 0 && linkedRuns.every((l) => l.agents.every((a) => a.shardHardLinks === SHARDS));
  rows.push({
    id: '11d',
    scenario: `11 the ${SHARDS} shards already in each node peer's cache (local hits), 4 replicas`,
    metric:
      "the agent's placement (hard links of the daemon's copies), vs reading the same shards from disk, page cache evicted",
    unit: 's',
    value: seconds(place),
    reference: seconds(linkedRuns.map((l) => l.coldReadMs)),
    referenceLabel: '(cold read of the 8 shards, all at once)',
    ratio: linkRatio,
    target: '≥ 10× faster (ratio ≤ 0.10×), 8 of 8 shards hard-linked on every replica',
    pass: allLinked && linkRatio.median <= 0.1,
    notes:
      `hard-linked shards per replica ${linkedRuns.map((l) => l.agents.map((a) => a.shardHardLinks).join('+')).join(', ')}; ` +
      `local hits ${linkedRuns.map((l) => l.agents.map((a) => a.localHits).join('+')).join(', ')} of ${FILES.length} files; ` +
      `create → all 4 Ready ${linkedRuns.map((l) => (l.readyMs / 1000).toFixed(2)).join(', ')} s`,
  });
  return rows;
}
