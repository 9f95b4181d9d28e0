/**
 * Scenarios 3 and 6, on one set-up (the 1 GiB archive is built and uploaded once): a REAL TorchServe 0.12 with the
 * peerload plugin, MinIO as the origin, peer-proxy emulators.
 *
 * 3. The plugin's download of the 1 GiB object through a peer-proxy emulator vs `curl -x <proxy> -o /dev/null` of
 *    the same URL, in the same run, both with the proxy's cache COLD (reset before each download: origin → proxy →
 *    client) and WARM (a local hit). JVM heap growth sampled with jstat during every plugin download.
 * 6. The four cache scenarios, each a plugin registration of the 1 GiB model: direct signed-URL download
 *    (the plugin's `addr` is a peer-proxy emulator in `forwardOnly` mode, so it forwards to the origin,
 *    streaming and uncached), P2P cold start (node peer and its parent both empty), hit on a remote peer (the
 *    parent peer on 127.0.0.2 holds the task, the node peer does not), hit on the local peer. Reference: reading
 *    the file the local hit serves (the node peer's cache file) from local disk with `cat > /dev/null`, the file
 *    evicted from the page cache first (as it is before the local hit that is compared with it); the page-cached
 *    numbers of both are in the notes.
 *
 * "Download time" of the plugin = from the POST to the moment the archive appears in the model store (the plugin
 * writes `.p2p-*.part`, then renames; no fsync): the download itself, without TorchServe's own registration work
 * afterwards (reported separately as the end-to-end time).
 */
import { execFile, spawnSync } from 'node:child_process';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm, stat, unlink, writeFile, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { effectiveFilter } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { startMinIO, type MinIO } from '../../test/support/minio.ts';
import { pluginJar } from '../../test/support/plugin.ts';
import { withHeapSampling } from '../../test/support/jvm-heap.ts';
import { buildLargeModelArchive, buildModelArchive } from '../../test/support/model-archive.ts';
import { startPeerProxy } from '../../test/support/peer-proxy.ts';
import { startTorchServe, type TorchServe } from '../../test/support/torchserve.ts';
import { MiB, progress, sleep, stat as stats, within, type Row } from '../lib/report.ts';
import { evictFromPageCache, settleDisk } from '../lib/disk.ts';
import type { PluginRun } from './plugin-run.ts';
import { realNetworkRow6 } from './s6-real-network.ts';

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '../..');
const BUCKET = 'models';
const KEY = 'big/big.mar';

export interface DataPlaneOptions {
  reps: number;
  sizeBytes: number;
  s3: boolean;
  s6: boolean;
}

export async function dataPlaneScenarios(o: DataPlaneOptions): Promise<{ rows: Row[]; raw: unknown }> {
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench-data-'));
  // The non-root TorchServe of the hard-linked case reads the plugin's configuration in here (0644).
  await chmod(work, 0o711);
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    progress('data plane: building the plugin jar');
    const jar = await pluginJar();

    const minio: MinIO = await startMinIO();
    cleanup.push(() => minio.stop());
    await minio.createBucket(BUCKET);
    progress(`data plane: building a ${(o.sizeBytes / MiB).toFixed(0)} MiB model archive and uploading it`);
    const tiny = await buildModelArchive(work, { modelName: 'tiny' });
    const big = await buildLargeModelArchive(tiny, work, 'big', o.sizeBytes);
    const size = (await stat(big.path)).size;
    await minio.client.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: KEY,
        Body: createReadStream(big.path),
        ContentLength: size,
      }),
    );
    const location = minio.location(BUCKET);
    const creds = minio.credentials();
    const filter = effectiveFilter(location);
    const signed = await signObjectURL(location, KEY, creds, { expiresSeconds: 6 * 3600 });
    const id = taskID({ url: signed.url, filter });

    // Peers: s3's proxy (no parent), s6's direct forwarder, seed peer (127.0.0.2) and node peer (parent = seed).
    const p3 = await startPeerProxy();
    // forwardOnly: the plugin sends X-Dragonfly-Use-P2P: true, which a daemon honours whatever its rules.
    const direct = await startPeerProxy({ forwardOnly: true });
    const seed = await startPeerProxy({ host: '127.0.0.2' });
    const node = await startPeerProxy({ parent: seed.url });
    cleanup.push(() => Promise.all([p3.close(), direct.close(), seed.close(), node.close()]));

    const configPath = join(work, 'p2p-endpoint.json');
    const setAddr = async (
      addr: string,
      header: Record<string, string> = {},
      extra: Record<string, unknown> = {},
    ) => {
      await writeFile(
        `${configPath}.tmp`,
        JSON.stringify({
          ...extra,
          addr,
          header,
          object_storage: {
            type: 's3',
            bucket_name: BUCKET,
            region: minio.region,
            access_key: minio.accessKey,
            secret_key: minio.secretKey,
            endpoint: minio.endpoint,
            path_style: 'true',
          },
        }),
      );
      await rename(`${configPath}.tmp`, configPath);
    };
    await setAddr(p3.url);
    progress('data plane: starting TorchServe with the plugin');
    const ts: TorchServe = await startTorchServe({
      pluginJars: [jar],
      env: { P2P_ENDPOINT_CONFIG: configPath },
      vmargs: '-Xmx384m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError',
      // DELETE /models/<name> (unregistering between repetitions) is gated by the model API in 0.12.
      config: { enable_model_api: 'true' },
    });
    cleanup.push(() => ts.stop());

    /** One registration through the plugin of `server` with the current `addr`. */
    const pluginRunOn = (server: TorchServe) => {
      const archiveInStore = join(server.modelStore, 'big.mar');
      const unregister = async () => {
        const res = await fetch(`${server.managementURL}/models/big`, {
          method: 'DELETE',
          headers: server.managementAuth(),
        });
        const text = await res.text();
        if (res.status !== 200 && res.status !== 404)
          throw new Error(`unregister answered ${res.status}: ${text}`);
        if (existsSync(archiveInStore)) await unlink(archiveInStore);
      };

      return async (sampleHeap: boolean): Promise<PluginRun> => {
        await unregister();
        settleDisk();
        const once = async () => {
          const t0 = performance.now();
          let downloadMs = NaN;
          let answered = false;
          const poll = (async () => {
            // Bounded: stops when the plugin answered (or failed) and after 10 minutes at most.
            while (!answered && !Number.isFinite(downloadMs) && performance.now() - t0 < 600_000) {
              if (existsSync(archiveInStore)) downloadMs = performance.now() - t0;
              else await sleep(5);
            }
          })();
          const res = await fetch(`${server.managementURL}/p2p/models?file_name=${encodeURIComponent(KEY)}`, {
            method: 'POST',
            headers: server.managementAuth(),
            signal: AbortSignal.timeout(600_000),
          }).catch(async (err: Error) => {
            answered = true;
            const log = await readFile(join(server.logsDir, 'ts_log.log'), 'utf8').catch(() => '');
            const out = await readFile(server.logPath, 'utf8').catch(() => '');
            throw new Error(
              `POST /p2p/models failed: ${err.message} (${String((err.cause as Error | undefined)?.message)}); ` +
                `ts_log.log tail:\n${log.slice(-3000)}\ntorchserve.out tail:\n${out.slice(-2000)}`,
            );
          });
          const body = (await res.json()) as {
            Status: string;
            CacheHit?: boolean;
            LocalHit?: boolean;
            HardLink?: boolean;
            TaskID?: string;
          };
          const totalMs = performance.now() - t0;
          answered = true;
          await poll;
          if (res.status !== 200) throw new Error(`plugin answered ${res.status}: ${body.Status}`);
          return {
            downloadMs: Number.isFinite(downloadMs) ? downloadMs : totalMs,
            totalMs,
            cacheHit: body.CacheHit,
            localHit: body.LocalHit,
            hardLink: body.HardLink,
            taskID: body.TaskID,
          };
        };
        if (!sampleHeap) return once();
        const { result, heap: h } = await withHeapSampling(server.pid, once);
        return { ...result, heap: h };
      };
    };
    const pluginRun = pluginRunOn(ts);

    /**
     * curl through `proxy` with the filter headers the plugin sends; body discarded (`toDisk` false, the reference
     * of the target) or written into the model store's directory, as the plugin must (neither fsyncs).
     */
    const curl = async (proxy: string, toDisk = false): Promise<number> => {
      const dst = join(ts.modelStore, '.bench-curl');
      settleDisk();
      if (toDisk) {
        const t0 = performance.now();
        await run(
          'bash',
          [
            '-c',
            'curl -sS --fail -x "$1" -o "$2" -H "$3" -H "$4" "$5"',
            'curl',
            proxy,
            dst,
            `X-Dragonfly-Filtered-Query-Params: ${filter.join(',')}`,
            `X-Dragonfly-Filter: ${filter.join('&')}`,
            signed.url,
          ],
          { timeout: 600_000 },
        );
        const ms = performance.now() - t0;
        const n = (await stat(dst)).size;
        await unlink(dst);
        if (n !== size) throw new Error(`curl wrote ${n} of ${size} bytes`);
        return ms;
      }
      const args = [
        '-sS',
        '--fail',
        '-x',
        proxy,
        '-o',
        '/dev/null',
        '-w',
        '%{time_total} %{size_download}',
        '-H',
        `X-Dragonfly-Filtered-Query-Params: ${filter.join(',')}`,
        '-H',
        `X-Dragonfly-Filter: ${filter.join('&')}`,
        signed.url,
      ];
      const { stdout } = await run('curl', args, { timeout: 600_000 });
      const [t, n] = stdout.trim().split(' ').map(Number);
      if (n !== size) throw new Error(`curl got ${n} of ${size} bytes`);
      return t! * 1000;
    };

    const rows: Row[] = [];
    const raw: Record<string, unknown> = { sizeBytes: size, taskID: id };

    // ------------------------------------------------------------------ scenario 3
    if (o.s3) {
      const r3 = {
        pluginCold: [] as PluginRun[],
        pluginWarm: [] as PluginRun[],
        curlCold: [] as number[],
        curlWarm: [] as number[],
        curlDiskCold: [] as number[],
        curlDiskWarm: [] as number[],
        /** Separate downloads under the jstat sampler (row 3c): the sampler's JVM is not in the timed ones. */
        heapRuns: [] as PluginRun[],
        /** One unmeasured download each way first: the plugin's first download in a fresh JVM runs interpreted. */
        warmUp: {} as { pluginMs?: number; curlMs?: number },
      };
      await setAddr(p3.url);
      p3.reset();
      r3.warmUp.pluginMs = (await pluginRun(false)).downloadMs;
      r3.warmUp.curlMs = await curl(p3.url);
      progress(
        `s3 warm-up (not measured): plugin ${r3.warmUp.pluginMs.toFixed(0)} ms, curl ${r3.warmUp.curlMs.toFixed(0)} ms`,
      );
      for (let rep = 0; rep < o.reps; rep++) {
        const pluginFirst = rep % 2 === 0;
        const doPlugin = async () => {
          p3.reset();
          r3.pluginCold.push(await pluginRun(false));
          r3.pluginWarm.push(await pluginRun(false));
        };
        const doCurl = async () => {
          p3.reset();
          r3.curlCold.push(await curl(p3.url));
          r3.curlWarm.push(await curl(p3.url));
          p3.reset();
          r3.curlDiskCold.push(await curl(p3.url, true));
          r3.curlDiskWarm.push(await curl(p3.url, true));
        };
        if (pluginFirst) {
          await doPlugin();
          await doCurl();
        } else {
          await doCurl();
          await doPlugin();
        }
        p3.reset();
        r3.heapRuns.push(await pluginRun(true), await pluginRun(true));
        progress(
          `s3 rep ${rep + 1}: plugin cold ${r3.pluginCold.at(-1)!.downloadMs.toFixed(0)} ms (answer ${r3.pluginCold.at(-1)!.totalMs.toFixed(0)}), ` +
            `warm ${r3.pluginWarm.at(-1)!.downloadMs.toFixed(0)} ms; curl cold ${r3.curlCold.at(-1)!.toFixed(0)} ms, warm ${r3.curlWarm.at(-1)!.toFixed(0)} ms; ` +
            `curl to disk cold ${r3.curlDiskCold.at(-1)!.toFixed(0)} ms, warm ${r3.curlDiskWarm.at(-1)!.toFixed(0)} ms; ` +
            `heap peak +${(r3.heapRuns.at(-1)!.heap!.peakGrowth / MiB).toFixed(1)} MiB`,
        );
      }
      const mibps = (ms: number) => size / MiB / (ms / 1000);
      for (const [suffix, label, p, c, cd] of [
        ['a', 'cold (proxy cache reset before each download)', r3.pluginCold, r3.curlCold, r3.curlDiskCold],
        ['b', 'warm (local hit in the proxy)', r3.pluginWarm, r3.curlWarm, r3.curlDiskWarm],
      ] as const) {
        const ratio = stats(p.map((x, i) => c[i]! / x.downloadMs));
        rows.push({
          id: `3${suffix}`,
          scenario: `plugin in TorchServe, ${(size / MiB).toFixed(0)} MiB through the peer-proxy emulator, ${label}`,
          metric: 'download throughput (POST → archive in the model store)',
          unit: 'MiB/s',
          value: stats(p.map((x) => mibps(x.downloadMs))),
          reference: stats(c.map(mibps)),
          referenceLabel: '(curl -x proxy -o /dev/null)',
          ratio,
          target: '≥ 0.9× curl',
          pass: ratio.median >= 0.9,
          notes:
            `plugin end-to-end (download + TorchServe registration) ${stats(p.map((x) => x.totalMs / 1000)).median.toFixed(2)} s; ` +
            `curl writing into the model store's directory: ${stats(cd.map(mibps)).median.toFixed(0)} MiB/s, plugin/that = ` +
            `${stats(p.map((x, i) => cd[i]! / x.downloadMs)).median.toFixed(2)}×`,
        });
      }
      if (process.env['BENCH_PROFILE'] === '1') {
        // JFR of one warm plugin download: bench/results/profiles/plugin-warm.jfr (jfr print --events
        // jdk.ExecutionSample,jdk.ThreadPark,jdk.FileForce,jdk.SocketRead ... to read it).
        const dir = join(ROOT, 'bench/results/profiles');
        await run('mkdir', ['-p', dir]);
        await run('jcmd', [String(ts.pid), 'JFR.start', 'name=bench', 'settings=profile']);
        const p = await pluginRun(false);
        await run('jcmd', [
          String(ts.pid),
          'JFR.stop',
          'name=bench',
          `filename=${join(dir, 'plugin-warm.jfr')}`,
        ]);
        progress(
          `s3 profile: JFR of a warm download (${p.downloadMs.toFixed(0)} ms) in ${dir}/plugin-warm.jfr`,
        );
      }
      const heaps = r3.heapRuns.map((x) => x.heap!);
      const growth = heaps.map((h) => Math.max(h.retained, h.oldGrowth, h.peakGrowth) / MiB);
      rows.push({
        id: '3c',
        scenario: `plugin in TorchServe, ${(size / MiB).toFixed(0)} MiB download (-Xmx384m, serial GC)`,
        metric: 'JVM heap growth during a download: max(peak used, old gen peak, retained after GC)',
        unit: 'MiB',
        value: stats(growth),
        target: '≤ 64 MiB',
        pass: Math.max(...growth) <= 64,
        notes:
          `peak used +${stats(heaps.map((h) => h.peakGrowth / MiB)).max.toFixed(1)} MiB, old gen +${stats(heaps.map((h) => h.oldGrowth / MiB)).max.toFixed(1)} MiB, ` +
          `retained +${stats(heaps.map((h) => h.retained / MiB)).max.toFixed(1)} MiB (worst of ${heaps.length} downloads; jstat every 200 ms)`,
      });
      raw['s3'] = r3;
    }

    // ------------------------------------------------------------------ scenario 6
    if (o.s6) {
      const nodeFile = join(node.cacheDir, `${id}.data`);
      const r6 = {
        /** Reading the node peer's cache file from disk: evicted from the page cache first. */
        disk: [] as number[],
        /** The same read with the file in the page cache. */
        diskWarm: [] as number[],
        /** Copying that file (evicted) into the model store: what any local hit must do at least. */
        copy: [] as number[],
        direct: [] as PluginRun[],
        cold: [] as PluginRun[],
        remote: [] as PluginRun[],
        /** Local hit with the peer's cache file evicted from the page cache (the model on disk). */
        local: [] as PluginRun[],
        /** Local hit right after the peer wrote the file (page cache warm). */
        localWarm: [] as PluginRun[],
        /** curl -o /dev/null of the local hit (file evicted): what the peer emulator serves at, whoever asks. */
        curlLocal: [] as number[],
      };
      const catFile = (file: string): number => {
        const t0 = performance.now();
        const r = spawnSync('bash', ['-c', 'cat "$1" > /dev/null', 'cat', file], { timeout: 300_000 });
        if (r.status !== 0) throw new Error(`cat ${file} failed`);
        return performance.now() - t0;
      };
      const copyFile = (file: string): number => {
        const dst = join(ts.modelStore, '.bench-copy');
        settleDisk();
        const t0 = performance.now();
        const r = spawnSync('dd', [`if=${file}`, `of=${dst}`, 'bs=256K', 'status=none'], {
          timeout: 300_000,
        });
        const ms = performance.now() - t0;
        spawnSync('rm', ['-f', dst]);
        if (r.status !== 0) throw new Error('dd failed');
        return ms;
      };
      for (let rep = 0; rep < o.reps; rep++) {
        await setAddr(direct.url);
        r6.direct.push(await pluginRun(false));
        seed.reset();
        node.reset();
        await setAddr(node.url);
        r6.cold.push(await pluginRun(false));
        // Remote hit: the parent (127.0.0.2) holds the task, the node peer does not.
        node.reset();
        if (!seed.hasTask(id)) await within('seed preheat', 600_000, seed.preheat(signed.url, { filter }));
        const remoteBefore = node.stats.remoteHits;
        const originBefore = node.stats.originRequests;
        r6.remote.push(await pluginRun(false));
        // The plugin's CacheHit only reflects X-Dragonfly-Task-Download-Finished (local hits): check the peer's own view.
        if (node.stats.remoteHits !== remoteBefore + 1 || node.stats.originRequests !== originBefore)
          throw new Error('the remote-hit case did not hit the parent peer');
        // Local hit: the node peer now holds it. "Bounded by disk speed" is about a model that sits on
        // the peer's disk, so the measured hit and its reference both start with the file out of the page cache.
        if (!existsSync(nodeFile)) throw new Error(`node cache file ${nodeFile} missing`);
        r6.localWarm.push(await pluginRun(false));
        r6.diskWarm.push(catFile(nodeFile));
        evictFromPageCache(nodeFile);
        r6.local.push(await pluginRun(false));
        evictFromPageCache(nodeFile);
        r6.disk.push(catFile(nodeFile));
        evictFromPageCache(nodeFile);
        r6.copy.push(copyFile(nodeFile));
        evictFromPageCache(nodeFile);
        r6.curlLocal.push(await curl(node.url));
        progress(
          `s6 rep ${rep + 1}: direct ${r6.direct.at(-1)!.downloadMs.toFixed(0)} ms, cold ${r6.cold.at(-1)!.downloadMs.toFixed(0)} ms, ` +
            `remote ${r6.remote.at(-1)!.downloadMs.toFixed(0)} ms (hit=${r6.remote.at(-1)!.cacheHit}), local ${r6.local.at(-1)!.downloadMs.toFixed(0)} ms ` +
            `(hit=${r6.local.at(-1)!.cacheHit}; page-cached ${r6.localWarm.at(-1)!.downloadMs.toFixed(0)} ms); ` +
            `disk read ${r6.disk.at(-1)!.toFixed(0)} ms (page-cached ${r6.diskWarm.at(-1)!.toFixed(0)} ms), copy ${r6.copy.at(-1)!.toFixed(0)} ms`,
        );
      }
      const rel = (runs: PluginRun[]) => stats(runs.map((x, i) => x.downloadMs / r6.disk[i]!));
      const secs = (runs: PluginRun[]) => stats(runs.map((x) => x.downloadMs / 1000));
      const disk = stats(r6.disk.map((x) => x / 1000));
      const scenario = `cache scenarios on the peer-proxy EMULATOR, ${(size / MiB).toFixed(0)} MiB through the plugin`;
      const coldVsDirect = stats(r6.cold.map((x, i) => x.downloadMs / r6.direct[i]!.downloadMs));
      const localVsDisk = stats(r6.local.map((x, i) => r6.disk[i]! / x.downloadMs));
      const mibpsOf = (ms: number[]) => stats(ms.map((x) => size / MiB / (x / 1000))).median.toFixed(0);
      rows.push(
        {
          id: '6a',
          scenario,
          metric: 'direct signed-URL download (proxy forwards, no cache)',
          unit: 's',
          value: secs(r6.direct),
          reference: disk,
          referenceLabel: '(disk read: cat file > /dev/null, evicted)',
          ratio: rel(r6.direct),
          target: 'relative time reported',
        },
        {
          id: '6b',
          scenario,
          metric: 'P2P cold start (node and parent caches empty)',
          unit: 's',
          value: secs(r6.cold),
          reference: secs(r6.direct),
          referenceLabel: '(direct, 6a)',
          ratio: coldVsDirect,
          target: '≤ 1.1× direct',
          pass: coldVsDirect.median <= 1.1,
          notes: `relative to the disk read: ${rel(r6.cold).median.toFixed(2)}×`,
        },
        {
          id: '6c',
          scenario,
          metric: 'hit on a remote peer (parent on 127.0.0.2 holds it)',
          unit: 's',
          value: secs(r6.remote),
          reference: disk,
          referenceLabel: '(disk read: cat file > /dev/null, evicted)',
          ratio: rel(r6.remote),
          target: 'relative time reported',
        },
        {
          id: '6d',
          scenario,
          metric: 'hit on the local peer: throughput (the cache file on disk, not in the page cache)',
          unit: 'MiB/s',
          value: stats(r6.local.map((x) => size / MiB / (x.downloadMs / 1000))),
          reference: stats(r6.disk.map((x) => size / MiB / (x / 1000))),
          referenceLabel: '(cat file > /dev/null, file evicted from the page cache)',
          ratio: localVsDisk,
          target: '≥ 0.8× disk read',
          pass: localVsDisk.median >= 0.8,
          notes:
            `relative time ${rel(r6.local).median.toFixed(2)}×; page cache warm on both sides: local hit ${mibpsOf(r6.localWarm.map((x) => x.downloadMs))} MiB/s ` +
            `vs cat ${mibpsOf(r6.diskWarm)} MiB/s (${stats(r6.localWarm.map((x, i) => r6.diskWarm[i]! / x.downloadMs)).median.toFixed(2)}×); ` +
            `copying the evicted file into the model store (dd, what a local hit must do at least) ${mibpsOf(r6.copy)} MiB/s = ` +
            `${stats(r6.copy.map((x, i) => r6.disk[i]! / x)).median.toFixed(2)}× the disk read; the local hit runs at ` +
            `${stats(r6.local.map((x, i) => r6.copy[i]! / x.downloadMs)).median.toFixed(2)}× that copy; the peer emulator ` +
            `itself serves the hit at ${mibpsOf(r6.curlLocal)} MiB/s (curl -o /dev/null, file evicted) = ` +
            `${stats(r6.curlLocal.map((x, i) => r6.disk[i]! / x)).median.toFixed(2)}× the disk read, the plugin at ` +
            `${stats(r6.local.map((x, i) => r6.curlLocal[i]! / x.downloadMs)).median.toFixed(2)}× that`,
        },
      );
      rows.push(
        ...(await realNetworkRow6({
          reps: o.reps,
          size,
          filter,
          signedURL: signed.url,
          directURL: direct.url,
          modelStore: ts.modelStore,
          setAddr,
          pluginRun,
          // The plugin uses a daemon's hard link only when TorchServe cannot write the daemon's file (it streams
          // otherwise, as it does from the root TorchServe above): this one runs as a non-root user without
          // capabilities, on the same plugin configuration.
          linkingServer: async () => {
            const linking = await startTorchServe({
              pluginJars: [jar],
              env: { P2P_ENDPOINT_CONFIG: configPath },
              vmargs: '-Xmx384m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError',
              config: { enable_model_api: 'true' },
              runAs: { uid: 1000, gid: 1000 },
            });
            cleanup.push(() => linking.stop());
            return { modelStore: linking.modelStore, pluginRun: pluginRunOn(linking) };
          },
          catFile,
          copyFile,
          cleanup,
          raw,
        })),
      );
      raw['s6'] = {
        ...r6,
        relativeToDiskRead: {
          direct: rel(r6.direct).median,
          cold: rel(r6.cold).median,
          remote: rel(r6.remote).median,
          local: rel(r6.local).median,
          localPageCached: stats(r6.localWarm.map((x, i) => x.downloadMs / r6.disk[i]!)).median,
          disk: 1,
        },
      };
    }
    return { rows, raw };
  } finally {
    for (const c of cleanup.reverse())
      await c().catch((e: unknown) => progress(`cleanup: ${(e as Error).message}`));
    await rm(work, { recursive: true, force: true });
  }
}
