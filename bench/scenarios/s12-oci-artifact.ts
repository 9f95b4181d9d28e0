/**
 * Scenario 12 (a model as a ModelPack artifact against the same files as an S3 directory, on the REAL Dragonfly
 * network: manager and scheduler v2.5.1, dfdaemon 1.4.2 as a seed peer and 4 node peers on their own 127.0.0.x
 * addresses): a model of `sizeBytes` in 8 shards, to N = 1, 2, 4 nodes, placed on each by the agent's own code
 * (`peerload fetch`, a process per node as each node runs its own, through the node's peer proxy, hard links of the
 * daemon's copies). Per repetition and N, on blobs of their own (each shard's first bytes differ per run):
 *   - s3:  the shards in MinIO (behind a counting proxy), a node-targeted `type: file` preheat of their signed URLs,
 *          then `peerload fetch --spec` of the directory on each of the N nodes at once;
 *   - oci: the shards pushed by the real `modctl` as 8 raw weight layers to the real registry (behind a counting
 *          proxy), a node-targeted `type: file` preheat of their blob URLs (the manager's `type: image` preheat
 *          refuses a registry on loopback: docs/dragonfly.md), then `peerload fetch oci://…` on each of the N nodes.
 *   - s3sum (with --checksums12): as s3, each file's sha256 in the spec, so the agent hashes every file as it hashes
 *          every layer: the artifact against it shows what the digest check costs, apart from the registry.
 * All are timed from the preheat's creation to the last node's placement, the placements starting as the job is
 * created (as a node-targeted gate opens); the push and the upload are not timed.
 * Target: oci within 1.1× of s3 at each N, the registry read once per blob (the peers' 1-byte probes aside), every
 * raw layer placed as a hard link.
 */
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ManagerClient } from '../../src/manager/client.ts';
import type { PlaceResult } from '../../src/cli/fetch-oci-place.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS } from '../../src/storage/taskid.ts';
import { startCountingProxy } from '../../test/support/counting-proxy.ts';
import { ROOT_USER, type DragonflyOptions } from '../../test/support/dragonfly.ts';
import { modctl, modctlBuild, nodePlacementArgs, type Modctl } from '../../test/support/modctl.ts';
import { jobEnd } from '../../test/support/job-end.ts';
import { startRegistry } from '../../test/support/registry.ts';
import { startHubEmulator } from '../../test/support/hub-emulator.ts';
import { getGlobalDispatcher } from 'undici';
import { HubClient } from '../../src/huggingface/client.ts';
import { hubEndpoint } from '../../src/huggingface/endpoint.ts';
import { listRepoFiles } from '../../src/huggingface/files.ts';
import { lfsLocations } from '../../src/huggingface/locations.ts';
import { hubVersionSpec } from '../../src/huggingface/version-spec.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { coresBusySince, cpuSeconds, machineTicks } from '../lib/cpu.ts';
import { dropPageCache } from '../lib/disk.ts';
import { peerloadFetchProcess } from '../lib/fetch-process.ts';
import * as realnet from '../lib/realnet.ts';
import { progress, stat, type Row } from '../lib/report.ts';

const BUCKET = 'bench12';
const NS = [1, 2, 4] as const;
/**
 * s3sum: the S3 directory with each file's sha256 in the spec, so the agent checks it as it checks a layer; hub: the
 * shards as a Hugging Face repository's LFS files.
 */
type Mode = 's3' | 'oci' | 's3sum' | 'hub';
const SHARDS = 8;
const shardName = (i: number) => `shard-${String(i + 1).padStart(2, '0')}-of-${SHARDS}.bin`;
const SHARD_NAMES = Array.from({ length: SHARDS }, (_, i) => shardName(i));

export interface S12Options {
  reps: number;
  /** The model's size: 8 shards of a 1/8th each. */
  sizeBytes: number;
  /** The replica counts to run (default 1, 2, 4). */
  ns?: readonly number[];
  /** The scheduler's retries as an admin sets them (default the stock ones); in the row's label. */
  schedulerRetries?: DragonflyOptions['schedulerRetries'];
  /**
   * Create a `single_seed_peer` job of the same URLs just before each node-targeted one, so the seed peer starts
   * its downloads with the node peers instead of when the first of them registers; in the row's label.
   */
  seedFirst?: boolean;
  /**
   * Also place the S3 directory with each file's sha256 in its spec (the agent then hashes every file, as it does
   * every layer of an artifact): what the digest check costs, apart from the registry; in the row's notes.
   */
  checksums?: boolean;
  /**
   * Also place the shards as a Hugging Face repository's LFS files (the Hub emulator, its CDN on loopback): a file
   * preheat of their CDN URLs, then `peerload fetch hf://` on each node; its own rows (12h), against the same S3
   * directory.
   */
  hub?: boolean;
}

interface Run {
  mode: Mode;
  n: number;
  rep: number;
  /** preheat created → the last node placed, ms. */
  totalMs: number;
  /** When the preheat was created (epoch ms: the placements' debug logs' `time`). */
  startedAt: number;
  /** preheat created → its SUCCESS seen (the manager's poll), ms; not part of totalMs. */
  preheatMs: number;
  /** Body bytes the origin (MinIO or the registry) served for the shards during the run. */
  originBytes: number;
  /**
   * oci: the most bytes the registry served for one blob, as a multiple of the blob's size, the peers' 1-byte
   * probes left out (a daemon asks for `bytes=0-0` before each download it starts: the seed's, and on a node both
   * the preheat's and the agent's).
   */
  maxBlobReads?: number;
  /** oci: the 1-byte probes the registry answered for the run's blobs. */
  probes?: number;
  /** Shards placed as hard links, summed over the nodes (of n × 8). */
  hardLinks: number;
  /** Shards that were local hits, summed over the nodes (of n × 8). */
  localHits: number;
  /** Bodies a daemon cut and the agent asked for again, over the nodes. */
  cutRetries: number;
  /**
   * The node peers' downloads sent back to the origin during the run, by cause (their daemons' logs): the scheduler
   * answered NeedBackToSource (no parent within its retries), or the peer's exchange with the scheduler failed.
   */
  backToSource: { scheduler: number; schedulerError: number };
  /** CPU seconds used during the run by the seed peer's daemon, the node peers' daemons (summed), this process
   *  (the origins' counting proxies), the placements' `peerload fetch` processes (summed; NaN without GNU time) and
   *  the origin servers (MinIO and the registry, summed: only the run's own origin serves during it). */
  cpu: { seed: number; nodes: number; bench: number; agents?: number; origins?: number };
  /** The machine's busy cores, on average from the preheat's creation to the last placement (of `cores`). */
  busyCores?: number;
  cores?: number;
  /** When the origin served the run's content (its GETs), ms from the preheat's creation. */
  originWindow?: { firstMs: number; lastMs: number } | undefined;
}

export async function scenario12(o: S12Options): Promise<{ rows: Row[]; raw: unknown }> {
  const shardBytes = Math.floor(o.sizeBytes / SHARDS);
  const shard = randomBytes(shardBytes);
  const runs: Run[] = [];
  const ns = o.ns ?? NS;
  // A network per N and repetition: the daemons keep every run's blobs, and N = 1, 2 and 4 on one network hold
  // more than 40 GiB of copies, more than the disk of a small machine has free.
  for (const n of [...ns].sort((a, b) => b - a))
    for (let rep = 0; rep < o.reps; rep++) runs.push(...(await repetition(rep, shard, [n], o)));
  return {
    rows: rowsOf(runs, shardBytes, ns, o),
    raw: {
      runs,
      sizeBytes: o.sizeBytes,
      shardBytes,
      loadavgAtEnd: readFileSync('/proc/loadavg', 'utf8').trim(),
    },
  };
}

/** Every timed case starts from an empty page cache where the kernel allows it (bench/lib/disk.ts says why). */
let refusedOnce = false;
function settle(): void {
  if (dropPageCache() || refusedOnce) return;
  refusedOnce = true;
  progress('s12: the kernel refused to drop the page cache (not root?): dirty pages are written back only');
}

/** One repetition on a network, a MinIO and a registry of its own, for each of `ns` (the largest first). */
async function repetition(
  rep: number,
  shard: Buffer,
  ns: readonly number[],
  { schedulerRetries, seedFirst, checksums, hub: withHub }: S12Options,
): Promise<Run[]> {
  const modes: Mode[] = [
    's3',
    'oci',
    ...(checksums ? ['s3sum' as const] : []),
    ...(withHub ? ['hub' as const] : []),
  ];
  const cleanup: realnet.Cleanup = [];
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench12-'));
  cleanup.push(() => rm(work, { recursive: true, force: true }));
  try {
    progress('s12: starting Dragonfly (manager, scheduler, seed peer, 4 node peers), MinIO and a registry');
    const net = await realnet.startRealNet(cleanup, BUCKET, 4, { schedulerRetries });
    const { network, minio, origin } = net;
    const registry = await startRegistry();
    cleanup.push(() => registry.stop());
    const reg = await startCountingProxy(registry.url);
    cleanup.push(() => reg.close());
    const tool = await modctl(join(work, 'modctl'));
    const manager = new ManagerClient({
      baseURL: network.managerURL,
      auth: {
        type: 'signIn',
        username: ROOT_USER.name,
        password: ROOT_USER.password,
      },
    });
    cleanup.push(() => manager.close());
    const location = { ...minio.location(BUCKET), endpoint: origin.url };
    let made = 0;
    /** The shards of a run: each different from every other run's (its first bytes). */
    const nextShard = () => {
      shard.writeUInt32BE(rep * 1000 + made++, 0);
      return shard;
    };

    /**
     * A node-targeted file preheat of `urls` on nodes 0..n-1, created now; the placements start at once, as a
     * node-targeted replica's gate opens when its node's job is created (docs/dragonfly.md). `ended()` waits for
     * the job's SUCCESS (the manager writes it on its own poll, tens of seconds later) and returns when it saw it.
     */
    const preheat = async (
      urls: string[],
      n: number,
      filter: string[] = [...DEFAULT_FILTERED_QUERY_PARAMS],
    ) => {
      if (seedFirst)
        await manager.createPreheatJob({
          type: 'file',
          urls,
          filteredQueryParams: filter,
          scope: 'single_seed_peer',
        });
      const job = await manager.createPreheatJob({
        type: 'file',
        urls,
        filteredQueryParams: filter,
        scope: 'all_peers',
        ips: network.peers.slice(0, n).map((p) => p.ip),
      });
      return {
        ended: async () => {
          const done = await jobEnd(manager, job.id, {
            timeoutMs: 600_000,
            intervalMs: 500,
          });
          if (done.state !== 'SUCCESS') throw new Error(`preheat ${job.id}: ${JSON.stringify(done.result)}`);
          return performance.now();
        },
      };
    };
    const fetchArgs = (peer: number, root: string) => nodePlacementArgs(network.peers[peer]!.proxyURL, root);
    let cuts = 0;
    let agentCpu = 0;
    const fetched = (name: string, r: Awaited<ReturnType<typeof peerloadFetchProcess>>) => {
      cuts += r.err.filter((l) => l.includes('the peer daemon cut the download')).length;
      agentCpu += r.cpuSeconds ?? NaN;
      if (r.code !== 0)
        throw new Error(`${name}: peerload fetch exit ${r.code}: ${[...r.out, ...r.err].join('; ')}`);
      return r.out;
    };
    /** What the node peers' logs count so far: the two ways a node peer goes back to the origin. */
    const peerCounts = async () => {
      const text = (await Promise.all(network.peers.map((p) => p.logs()))).join('\n');
      const count = (re: RegExp) => text.match(re)?.length ?? 0;
      return {
        scheduler: count(/need back to source response/g),
        schedulerError: count(/download with scheduler error/g),
      };
    };
    const cpuNow = () => ({
      seed: cpuSeconds(network.seedPeer?.process.child.pid),
      nodes: network.peers.reduce((s, p) => s + cpuSeconds(p.process.child.pid), 0),
      bench: (process.cpuUsage().user + process.cpuUsage().system) / 1e6,
      origins: cpuSeconds(minio.process.child.pid) + cpuSeconds(registry.process.child.pid),
    });
    const cpuSince = (before: Run['cpu']) => {
      const now = cpuNow();
      return {
        seed: now.seed - before.seed,
        nodes: now.nodes - before.nodes,
        bench: now.bench - before.bench,
        origins: now.origins - before.origins!,
      };
    };
    const since = async (before: Run['backToSource']) => {
      const now = await peerCounts();
      return {
        scheduler: now.scheduler - before.scheduler,
        schedulerError: now.schedulerError - before.schedulerError,
      };
    };

    /**
     * The timed part every directory-shaped mode shares: the preheat of `urls` (with `filter` left out of the ids)
     * created, each of the N nodes' `peerload fetch` started at once (`argvOf(node, root)`, its one output line
     * "… (L local hits, H hard links)"), then the job's end; what every mode's Run holds besides its origin.
     */
    async function timedPlacement(
      n: number,
      name: string,
      urls: string[],
      filter: string[],
      argvOf: (node: number, root: string) => string[],
    ) {
      const counts0 = await peerCounts();
      const cpu0 = cpuNow();
      cuts = 0;
      agentCpu = 0;
      const ticks0 = machineTicks();
      const t0 = performance.now();
      const startedAt = Date.now();
      const job = await preheat(urls, n, filter);
      const lines = await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const root = join(work, `node-${i}`, name);
          await mkdir(root, { recursive: true });
          return fetched(name, await peerloadFetchProcess([...argvOf(i, root), ...fetchArgs(i, root)]))[0]!;
        }),
      );
      const totalMs = performance.now() - t0;
      const busyCores = coresBusySince(ticks0, availableParallelism());
      const preheatMs = (await job.ended()) - t0;
      const counts = lines.map((l) => /\((\d+) local hits, (\d+) hard links\)/.exec(l));
      if (counts.some((c) => !c)) throw new Error(`unexpected fetch output: ${lines.join('; ')}`);
      return {
        t0,
        n,
        rep,
        totalMs,
        startedAt,
        busyCores,
        cores: availableParallelism(),
        preheatMs,
        localHits: counts.reduce((sum, c) => sum + Number(c![1]), 0),
        hardLinks: counts.reduce((sum, c) => sum + Number(c![2]), 0),
        cutRetries: cuts,
        backToSource: await since(counts0),
        cpu: { ...cpuSince(cpu0), agents: agentCpu },
      };
    }

    async function s3(n: number, name: string, sums: boolean): Promise<Run> {
      const digests: string[] = [];
      for (const p of SHARD_NAMES) {
        const body = nextShard();
        digests.push(createHash('sha256').update(body).digest('hex'));
        await minio.putObject(BUCKET, `${name}/${p}`, body);
      }
      settle();
      const files = [];
      for (const [i, p] of SHARD_NAMES.entries())
        files.push({
          path: p,
          ...(sums ? { sha256: digests[i] } : {}),
          url: (
            await signObjectURL(location, `${name}/${p}`, minio.credentials(), {
              expiresSeconds: 3600,
            })
          ).url,
        });
      const spec = join(work, `${name}.json`);
      await writeFile(
        spec,
        JSON.stringify({
          version: '1',
          files,
          filter: DEFAULT_FILTERED_QUERY_PARAMS,
        }),
      );
      const before = served(origin, `/${BUCKET}/${name}/`);
      const { t0, ...timed } = await timedPlacement(
        n,
        name,
        files.map((f) => f.url),
        [...DEFAULT_FILTERED_QUERY_PARAMS],
        (_, root) => ['--name', name, '--spec', spec, '--root', root],
      );
      return {
        mode: sums ? 's3sum' : 's3',
        ...timed,
        originBytes: served(origin, `/${BUCKET}/${name}/`) - before,
        originWindow: originWindow(origin, `/${BUCKET}/${name}/`, t0),
      };
    }

    async function oci(n: number, name: string, m: Modctl): Promise<Run> {
      const src = join(work, 'src', name);
      await mkdir(src, { recursive: true });
      for (const p of SHARD_NAMES) await writeFile(join(src, p), nextShard());
      await writeFile(
        join(src, 'Modelfile'),
        `NAME ${name}\nARCH transformer\nFAMILY bench\nFORMAT safetensors\n` +
          SHARD_NAMES.map((p) => `MODEL ${p}\n`).join(''),
      );
      const reference = `${new URL(reg.url).host}/bench/${name}:v1`;
      await modctlBuild(m, src, reference);
      await rm(src, { recursive: true, force: true });
      settle();
      const manifest = (await (
        await fetch(`${registry.url}/v2/bench/${name}/manifests/v1`, {
          headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
        })
      ).json()) as {
        layers: { digest: string; size: number; mediaType: string }[];
      };
      if (manifest.layers.length !== SHARDS || !manifest.layers.every((l) => l.mediaType.endsWith('.raw')))
        throw new Error(`modctl pushed ${JSON.stringify(manifest.layers)}`);
      const pushed = reg.requests.length;
      const counts0 = await peerCounts();
      const cpu0 = cpuNow();
      cuts = 0;
      agentCpu = 0;
      const ticks0 = machineTicks();
      const t0 = performance.now();
      const startedAt = Date.now();
      const job = await preheat(
        manifest.layers.map((l) => `${reg.url}/v2/bench/${name}/blobs/${l.digest}`),
        n,
      );
      const results = await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const root = join(work, `node-${i}`, 'oci', name);
          await mkdir(root, { recursive: true });
          const out = fetched(
            name,
            await peerloadFetchProcess([
              `oci://${reference}`,
              join(root, '1'),
              '--plain-http',
              '--json',
              ...fetchArgs(i, root),
            ]),
          );
          return JSON.parse(out[0]!) as PlaceResult;
        }),
      );
      const totalMs = performance.now() - t0;
      const busyCores = coresBusySince(ticks0, availableParallelism());
      const preheatMs = (await job.ended()) - t0;
      const blobGets = reg.requests
        .slice(pushed)
        .filter((q) => q.method === 'GET' && q.url.includes('/blobs/'));
      const isProbe = (q: { bytes: number }) => q.bytes <= 1;
      const blobBytes = (digest: string) =>
        blobGets
          .filter((q) => q.url.includes(`/blobs/${digest}`) && !isProbe(q))
          .reduce((s, q) => s + q.bytes, 0);
      const layers = results.flatMap((r) => r.layers);
      return {
        mode: 'oci',
        n,
        rep,
        totalMs,
        startedAt,
        busyCores,
        cores: availableParallelism(),
        preheatMs,
        originBytes: manifest.layers.reduce((s, l) => s + blobBytes(l.digest), 0),
        originWindow: originWindow(reg, `/v2/bench/${name}/blobs/`, t0),
        maxBlobReads: Math.max(...manifest.layers.map((l) => blobBytes(l.digest) / l.size)),
        probes: blobGets.filter(isProbe).length,
        localHits: layers.filter((l) => l.localHit === true).length,
        hardLinks: layers.filter((l) => l.hardLink === true).length,
        cutRetries: cuts,
        backToSource: await since(counts0),
        cpu: { ...cpuSince(cpu0), agents: agentCpu },
      };
    }

    /**
     * The shards as a Hub repository's LFS files, served by the Hub emulator (its CDN on loopback, behind nothing:
     * it counts its own bytes): the file preheat of their CDN URLs as a ModelPreheat of the source plans it (the
     * CDN's query left out of the ids), then `peerload fetch hf://` on each node.
     */
    async function hub(n: number, name: string): Promise<Run> {
      const repo = `bench/${name}`;
      const shards = SHARD_NAMES.map(() => Buffer.from(nextShard()));
      const emulator = await startHubEmulator({
        repos: [
          {
            id: repo,
            commits: [Object.fromEntries(SHARD_NAMES.map((p, i) => [p, { content: shards[i]!, lfs: true }]))],
          },
        ],
      });
      try {
        settle();
        const endpoint = hubEndpoint(emulator.url, 'http://127.0.0.1');
        const client = new HubClient({ endpoint, dispatcher: getGlobalDispatcher() });
        const listing = await listRepoFiles(client, repo, 'main', {});
        const located = await lfsLocations(client, listing, {
          hosts: parseHostRules('http://127.0.0.1'),
          flag: '--allowed-hub-redirect-hosts',
        });
        const spec = hubVersionSpec(endpoint, listing, located, { headers: {} });
        // The CDN's query parameters left out of the ids, as the source's ModelPreheat plans its job.
        const { t0: _t0, ...timed } = await timedPlacement(
          n,
          name,
          spec.files.map((f) => f.url!),
          spec.filter ?? [],
          (_, root) => [
            `hf://${repo}`,
            root,
            '--endpoint',
            emulator.url,
            '--allowed-hub-redirect-hosts',
            'http://127.0.0.1',
          ],
        );
        const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
        return {
          mode: 'hub',
          ...timed,
          originBytes: shards.reduce((sum, b) => sum + emulator.cdnBytes(sha(b)), 0),
          maxBlobReads: Math.max(...shards.map((b) => emulator.cdnBytes(sha(b)) / b.length)),
        };
      } finally {
        await emulator.close();
      }
    }

    const runs: Run[] = [];
    for (const n of [...ns].sort((a, b) => b - a))
      for (const mode of rep % 2 === 0 ? modes : [...modes].reverse()) {
        const name = `${mode}-${n}-${rep}`;
        const r =
          mode === 'oci'
            ? await oci(n, name, tool)
            : mode === 'hub'
              ? await hub(n, name)
              : await s3(n, name, mode === 's3sum');
        runs.push(r);
        progress(`s12 ${JSON.stringify(r)}`);
        if (mode === 's3' || mode === 's3sum')
          await realnet.dropObjects(
            net,
            BUCKET,
            SHARD_NAMES.map((p) => `${name}/${p}`),
          );
        for (let i = 0; i < n; i++) await rm(join(work, `node-${i}`), { recursive: true, force: true });
      }
    return runs;
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}

const served = (proxy: { requests: { method: string; url: string; bytes: number }[] }, part: string) =>
  proxy.requests.filter((q) => q.method === 'GET' && q.url.includes(part)).reduce((s, q) => s + q.bytes, 0);

/** When the origin served the run's GETs of `part`, from `t0`: the first request's arrival and the last body's end, ms. */
function originWindow(
  proxy: { requests: { method: string; url: string; startedAt?: number; endedAt?: number }[] },
  part: string,
  t0: number,
): Run['originWindow'] {
  const gets = proxy.requests.filter(
    (q) => q.method === 'GET' && q.url.includes(part) && (q.startedAt ?? 0) >= t0,
  );
  if (gets.length === 0) return undefined;
  return {
    firstMs: Math.min(...gets.map((q) => q.startedAt!)) - t0,
    lastMs: Math.max(...gets.map((q) => q.endedAt ?? q.startedAt!)) - t0,
  };
}

const cpuOf = (r: Run) =>
  `${r.cpu.seed.toFixed(0)}/${r.cpu.nodes.toFixed(0)}/${r.cpu.bench.toFixed(0)}/${Number.isFinite(r.cpu.agents) ? r.cpu.agents!.toFixed(1) : '—'}/${r.cpu.origins?.toFixed(0) ?? '—'}`;
const windowOf = (r: Run) =>
  r.originWindow
    ? `${(r.originWindow.firstMs / 1000).toFixed(1)}→${(r.originWindow.lastMs / 1000).toFixed(1)}`
    : '—';
const b2s = (r: Run) => `${r.backToSource.scheduler}+${r.backToSource.schedulerError}`;

function rowsOf(runs: Run[], shardBytes: number, ns: readonly number[], o: S12Options): Row[] {
  return [...ociRows(runs, shardBytes, ns, o), ...hubRows(runs, shardBytes, ns)];
}

/** Rows 12h: the shards as a Hub repository's LFS files against the same S3 directory, per N. */
function hubRows(runs: Run[], shardBytes: number, ns: readonly number[]): Row[] {
  const MiB = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  if (!runs.some((r) => r.mode === 'hub')) return [];
  return ns.map((n) => {
    const h = runs.filter((r) => r.mode === 'hub' && r.n === n);
    const s = runs.filter((r) => r.mode === 's3' && r.n === n);
    const ratio = stat(
      h.map((r) => {
        const ref = s.find((x) => x.rep === r.rep);
        return ref ? r.totalMs / ref.totalMs : NaN;
      }),
    );
    const once = h.every((r) => r.maxBlobReads !== undefined && r.maxBlobReads <= 1.01);
    const linked = h.every((r) => r.hardLinks === n * SHARDS);
    return {
      id: `12h-${n}`,
      scenario: `12h a ${MiB(shardBytes * SHARDS)} Hugging Face repository of ${SHARDS} LFS files to ${n} node(s) through the agent's fetch, real network`,
      metric:
        'preheat (file job of the CDN URLs, node-targeted) → placed on every node, vs the same files as an S3 directory',
      unit: 's',
      value: stat(h.map((r) => r.totalMs / 1000)),
      reference: stat(s.map((r) => r.totalMs / 1000)),
      referenceLabel: '(S3 directory, same N, same run)',
      ratio,
      target: '≤ 1.1× the S3 directory, the CDN read once per file, every file a hard link',
      pass: h.length > 0 && ratio.median <= 1.1 && once && linked,
      notes:
        `CDN bytes per run ${h.map((r) => MiB(r.originBytes)).join(', ')} (max per file ${h.map((r) => r.maxBlobReads?.toFixed(4)).join(', ')}×); ` +
        `hard links ${h.map((r) => `${r.hardLinks}/${n * SHARDS}`).join(', ')}; local hits ${h.map((r) => `${r.localHits}/${n * SHARDS}`).join(', ')}; ` +
        `node peers sent to the origin ${h.map(b2s).join(', ')}; CPU s ${h.map(cpuOf).join(', ')}; ` +
        `busy cores ${h.map((r) => r.busyCores?.toFixed(2)).join(', ')}`,
    };
  });
}

/** Rows 12a–c: the artifact against the same S3 directory, per N. */
function ociRows(
  runs: Run[],
  shardBytes: number,
  ns: readonly number[],
  { schedulerRetries: retries, seedFirst }: S12Options,
): Row[] {
  const MiB = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  return ns.map((n) => {
    const of = (mode: Mode) => runs.filter((r) => r.mode === mode && r.n === n);
    const o = of('oci');
    const s = of('s3');
    const summed = of('s3sum');
    const against = (refs: Run[]) =>
      stat(
        o.map((r) => {
          const ref = refs.find((x) => x.rep === r.rep);
          return ref ? r.totalMs / ref.totalMs : NaN;
        }),
      );
    const ratio = against(s);
    const fmt = (v: { median: number; min: number; max: number }, d = 2) =>
      `${v.median.toFixed(d)} [${v.min.toFixed(d)}–${v.max.toFixed(d)}]`;
    const sums =
      summed.length > 0
        ? `the S3 directory with each file's sha256 checked: ${fmt(stat(summed.map((r) => r.totalMs / 1000)), 1)} s, the artifact ${fmt(against(summed))}× of it, CPU s as below ${summed.map(cpuOf).join(', ')}; `
        : '';
    const once = o.every((r) => r.maxBlobReads !== undefined && r.maxBlobReads <= 1);
    const linked = o.every((r) => r.hardLinks === n * SHARDS);
    return {
      id: `12${'abc'[NS.indexOf(n as 1 | 2 | 4)] ?? `-${n}`}`,
      scenario: `12 a ${MiB(shardBytes * SHARDS)} ModelPack artifact of ${SHARDS} raw layers to ${n} node(s) through the agent's fetch, real network${retries ? `, scheduler retries ${retries.backToSourceLimit}/${retries.limit}` : ''}${seedFirst ? ', a seed-peer job first' : ''}`,
      metric:
        'preheat (file job, node-targeted) → placed on every node, vs the same files as an S3 directory',
      unit: 's',
      value: stat(o.map((r) => r.totalMs / 1000)),
      reference: stat(s.map((r) => r.totalMs / 1000)),
      referenceLabel: '(S3 directory, same N, same run)',
      ratio,
      target: '≤ 1.1× the S3 directory, the registry read once per blob, every raw layer a hard link',
      pass: o.length > 0 && ratio.median <= 1.1 && once && linked,
      notes:
        sums +
        `registry bytes per run ${o.map((r) => MiB(r.originBytes)).join(', ')} (max per blob ${o.map((r) => r.maxBlobReads?.toFixed(6)).join(', ')}×, 1-byte probes ${o.map((r) => r.probes).join(', ')}); ` +
        `MinIO bytes ${s.map((r) => MiB(r.originBytes)).join(', ')}; ` +
        `hard links oci ${o.map((r) => `${r.hardLinks}/${n * SHARDS}`).join(', ')}, s3 ${s.map((r) => `${r.hardLinks}/${n * SHARDS}`).join(', ')}; ` +
        `local hits oci ${o.map((r) => `${r.localHits}/${n * SHARDS}`).join(', ')}, s3 ${s.map((r) => `${r.localHits}/${n * SHARDS}`).join(', ')}; ` +
        `preheat oci ${o.map((r) => (r.preheatMs / 1000).toFixed(1)).join(', ')} s, s3 ${s.map((r) => (r.preheatMs / 1000).toFixed(1)).join(', ')} s; ` +
        `node peers sent to the origin (scheduler's NeedBackToSource + failed scheduler exchange) oci ${o.map(b2s).join(', ')}, s3 ${s.map(b2s).join(', ')}; ` +
        `cut bodies asked again oci ${o.map((r) => r.cutRetries).join(', ')}, s3 ${s.map((r) => r.cutRetries).join(', ')}; ` +
        `CPU s (seed / node daemons / origins' proxies / agents' fetches / origin servers) oci ${o.map(cpuOf).join(', ')}, s3 ${s.map(cpuOf).join(', ')}; ` +
        `busy cores of ${o[0]?.cores ?? '?'} (preheat → last placement) oci ${o.map((r) => r.busyCores?.toFixed(2)).join(', ')}, s3 ${s.map((r) => r.busyCores?.toFixed(2)).join(', ')}${summed.length > 0 ? `, s3sum ${summed.map((r) => r.busyCores?.toFixed(2)).join(', ')}` : ''}; ` +
        `origin reads from the preheat's creation (first request → last body end, s) oci ${o.map(windowOf).join(', ')}, s3 ${s.map(windowOf).join(', ')}`,
    };
  });
}
