/**
 * Does a download through a node peer JOIN a preheat job that is still running on that peer? On the REAL network
 * (manager and scheduler v2.5.1, dfdaemon 1.4.2, a seed peer and 4 node peers, MinIO behind a counting proxy):
 * for N = 4, 2, 1 node peers, a preheat job (scope all_peers, the N peers' IPs) is created, and `--delay-ms` after
 * the manager answered the create, each of the N peers is asked for the same object through its proxy, as the
 * plugin asks (X-Dragonfly-Use-P2P, both filter headers, a URL signed at another moment). Recorded: each download's
 * time from the create and its answer headers, the origin's bytes for the object, the job's end and per-peer
 * results, and what each daemon's log says of the task (pieces from a parent, back-to-source). The reference is
 * one direct download of an object of the same size from the origin (the floor, t1).
 * `--scope single_seed_peer` or `all_seed_peers`: the job preheats the seed peer only and the N node peers, which
 * it does not touch, download `--delay-ms` after its create (0: at once), as replicas do whose gate opens on the job.
 *
 *   node_modules/.bin/node bench/tools/join-running-preheat.ts --size-mib 1024 --delay-ms 300 --reps 2
 *   node_modules/.bin/node bench/tools/join-running-preheat.ts --scope single_seed_peer --delay-ms 0 --ns 1,2,4
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { ManagerClient } from '../../src/manager/client.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { startCountingProxy } from '../../test/support/counting-proxy.ts';
import { startDragonfly, type DragonflyPeer } from '../../test/support/dragonfly.ts';
import { startMinIO } from '../../test/support/minio.ts';

const { values } = parseArgs({
  options: {
    'size-mib': { type: 'string' },
    'delay-ms': { type: 'string' },
    reps: { type: 'string' },
    ns: { type: 'string' },
    scope: { type: 'string' },
  },
});
const size = Number(values['size-mib'] ?? 1024) * 2 ** 20;
const delayMs = Number(values['delay-ms'] ?? 300);
const reps = Number(values.reps ?? 1);
const ns = (values.ns ?? '4,2,1').split(',').map(Number);
// all_peers targets the downloading peers themselves; a seed-peer scope preheats the seed peer only, and the
// downloads through node peers that the job does not touch must join the seed peer's task.
const scope = (values.scope ?? 'all_peers') as 'all_peers' | 'single_seed_peer' | 'all_seed_peers';
const BUCKET = 'join';
const log = (s: string) => process.stderr.write(`[join ${new Date().toISOString().slice(11, 19)}] ${s}\n`);

interface Download {
  ms: number;
  status: number;
  taskID?: string | undefined;
  finished?: string | undefined;
  bytes: number;
}

/** One GET as the plugin sends it, through `proxyURL` (or straight to the origin), written to `file`. */
function download(url: string, filter: string[], file: string, proxyURL?: string): Promise<Download> {
  const target = new URL(url);
  const proxy = proxyURL ? new URL(proxyURL) : undefined;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy ? proxy.hostname : target.hostname,
        port: proxy ? proxy.port : target.port,
        path: proxy ? target.href : target.pathname + target.search,
        headers: {
          host: target.host,
          ...(proxy
            ? {
                'X-Dragonfly-Use-P2P': 'true',
                'X-Dragonfly-Filtered-Query-Params': filter.join(','),
                'X-Dragonfly-Filter': filter.join('&'),
              }
            : {}),
        },
      },
      (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        pipeline(res, createWriteStream(file))
          .then(() =>
            resolve({
              ms: performance.now() - started,
              status: res.statusCode ?? 0,
              taskID: res.headers['x-dragonfly-task-id'] as string | undefined,
              finished: res.headers['x-dragonfly-task-download-finished'] as string | undefined,
              bytes,
            }),
          )
          .catch(reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/**
 * What a daemon's log says of `taskID`, as events: `<time> <proxy|preheat|other>:<event>`, where proxy is the
 * download through the daemon's proxy and preheat the scheduler's download_task (the preheat job on that peer).
 */
async function taskLog(peer: DragonflyPeer, taskID: string): Promise<string[]> {
  const text = await peer.logs();
  const events: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.includes(taskID)) continue;
    const m = /(download task started|back to source|all pieces are downloaded|normal task response)/.exec(
      line,
    );
    if (!m) continue;
    const kind = line.includes('http_handler')
      ? 'proxy'
      : line.includes('download_task')
        ? 'preheat'
        : 'other';
    events.push(`${line.slice(11, 23)} ${kind}:${m[1]}`);
  }
  return events;
}

async function main() {
  const work = await mkdtemp(join(tmpdir(), 'peerload-join-'));
  log('starting Dragonfly (manager, scheduler, seed peer, 4 node peers) and MinIO');
  const network = await startDragonfly({ nodePeers: 4 });
  const minio = await startMinIO();
  const origin = await startCountingProxy(minio.endpoint);
  const results: unknown[] = [];
  try {
    await minio.createBucket(BUCKET);
    const location = { ...minio.location(BUCKET), endpoint: origin.url };
    const bytes = randomBytes(size);
    const jwt = await network.signIn();
    const manager = new ManagerClient({ baseURL: network.managerURL, auth: { type: 'token', token: jwt } });
    for (let rep = 0; rep < reps; rep++) {
      // The floor: one direct download of an object of the same size.
      const dkey = `direct-${rep}.bin`;
      await minio.putObject(BUCKET, dkey, bytes);
      const d = await signObjectURL(location, dkey, minio.credentials(), { expiresSeconds: 3600 });
      const direct = await download(d.url, d.filter, join(work, dkey));
      await rm(join(work, dkey));
      log(`rep ${rep} direct: ${direct.ms.toFixed(0)} ms`);
      results.push({ rep, mode: 'direct', ms: direct.ms });
      for (const n of ns) {
        const key = `join-${n}-${rep}.bin`;
        await minio.putObject(BUCKET, key, bytes);
        const peers = network.peers.slice(0, n);
        // The preheat's URL and the plugin's are signed at different moments; the filter makes their task ids equal.
        const pre = await signObjectURL(location, key, minio.credentials(), {
          now: new Date(Date.now() - 30_000),
          expiresSeconds: 3600,
        });
        const dl = await signObjectURL(location, key, minio.credentials(), { expiresSeconds: 3600 });
        const before = origin.bytesServed(key);
        const t0 = performance.now();
        const job = await manager.createPreheatJob({
          type: 'file',
          urls: [pre.url],
          filteredQueryParams: pre.filter,
          scope,
          ...(scope === 'all_peers' ? { ips: peers.map((p) => p.ip) } : {}),
          bio: 'join-running-preheat',
        });
        const createdMs = performance.now() - t0;
        await new Promise((r) => setTimeout(r, delayMs));
        const downloads = Promise.all(
          peers.map((p, i) => download(dl.url, dl.filter, join(work, `${key}.${i}`), p.proxyURL)),
        );
        let ended: { ms: number; state: string; results: unknown } | undefined;
        const watch = (async () => {
          for (;;) {
            const j = await manager.getJob(job.id);
            if (j.state === 'SUCCESS' || j.state === 'FAILURE') {
              ended = { ms: performance.now() - t0, state: j.state, results: j.result };
              return;
            }
            await new Promise((r) => setTimeout(r, 250));
          }
        })();
        const got = await downloads;
        const allDoneMs = performance.now() - t0;
        await watch;
        const taskID = got[0]?.taskID ?? '';
        const logs = Object.fromEntries(
          await Promise.all(
            [...peers, network.seedPeer!].map(async (p) => [p.name, await taskLog(p, taskID)] as const),
          ),
        );
        const r = {
          rep,
          mode: 'join',
          scope,
          n,
          delayMs,
          createdMs,
          allDoneMs,
          perReplicaMs: got.map((g) => g.ms + createdMs + delayMs),
          headers: got.map((g) => ({
            status: g.status,
            taskID: g.taskID,
            finished: g.finished,
            bytes: g.bytes,
          })),
          originBytes: origin.bytesServed(key) - before,
          size,
          job: ended,
          logs,
        };
        log(
          `rep ${rep} ${scope} N=${n}: all done ${allDoneMs.toFixed(0)} ms after the create (create answered in ${createdMs.toFixed(0)} ms), ` +
            `origin ${r.originBytes} of ${size}, job ${ended?.state} at ${ended?.ms.toFixed(0)} ms, finished headers ${got.map((g) => g.finished).join(',')}`,
        );
        results.push(r);
        for (let i = 0; i < n; i++) await rm(join(work, `${key}.${i}`), { force: true });
      }
    }
    console.log(JSON.stringify({ date: new Date().toISOString(), size, delayMs, results }, null, 2));
  } finally {
    await origin.close().catch(() => undefined);
    await minio.stop().catch(() => undefined);
    await network.stop().catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }
}

await main();
