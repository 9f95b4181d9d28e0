/**
 * Row 6 on the REAL Dragonfly network, run by scenario 6 (s3-s6-dataplane.ts) on its TorchServe, MinIO object and
 * plugin configuration: direct, cold start through the network, hit on a remote peer, hit on the local peer, and
 * the hard-linked local hit and cold start (in a TorchServe that runs as a non-root user), each against references
 * measured in the same repetition.
 */
import { execFile } from 'node:child_process';
import { stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startDragonfly } from '../../test/support/dragonfly.ts';
import { evictFromPageCache, settleDisk } from '../lib/disk.ts';
import { MiB, progress, stat as stats, type Row } from '../lib/report.ts';
import type { PluginRun } from './plugin-run.ts';

const run = promisify(execFile);

/** What row 6 on the real network takes from the data-plane scenario's set-up. */
export interface RealRow6Context {
  reps: number;
  /** The archive's size in bytes. */
  size: number;
  /** The query parameters the plugin's task id leaves out (its default for the storage kind). */
  filter: readonly string[];
  /** The object's signed URL (what the plugin downloads). */
  signedURL: string;
  /** A proxy that only forwards to the origin: the direct download. */
  directURL: string;
  /** TorchServe's model store, where the archive lands. */
  modelStore: string;
  /** Writes the plugin's configuration: its proxy address, extra headers and other settings. */
  setAddr(addr: string, header?: Record<string, string>, extra?: Record<string, unknown>): Promise<void>;
  /** One registration through the plugin with the current configuration. */
  pluginRun(sampleHeap: boolean): Promise<PluginRun>;
  /**
   * Starts a second TorchServe on the same plugin configuration, one that cannot write the daemon's files (a
   * non-root user without capabilities), so the plugin may take the daemon's hard link; stopped by `cleanup`.
   */
  linkingServer(): Promise<{ modelStore: string; pluginRun(sampleHeap: boolean): Promise<PluginRun> }>;
  /** Reads a file to /dev/null, ms. */
  catFile(file: string): number;
  /** Copies a file into the model store, ms. */
  copyFile(file: string): number;
  /** Stops what the row starts, run by the scenario. */
  cleanup: (() => Promise<unknown>)[];
  raw: Record<string, unknown>;
}

/**
 * Row 6 on the REAL Dragonfly network (test/support/dragonfly.ts: manager, scheduler, a seed peer and a node
 * peer, dfdaemon 1.4.2), every case a registration through the plugin in the same TorchServe. Each repetition
 * uses fresh task ids by way of an `X-Dragonfly-Tag` in the plugin's headers (the tag is part of the task id), so
 * a cold start is cold on both peers without restarting them. References of the same repetition: the direct
 * download (6a's forwarder), reading the node peer's cached file from disk out of the page cache, and a bare
 * copy of that file into the model store (what a local hit must do at least: the archive must land there).
 */
export async function realNetworkRow6(c: RealRow6Context): Promise<Row[]> {
  const {
    reps,
    size,
    filter,
    signedURL,
    directURL,
    modelStore,
    setAddr,
    pluginRun,
    linkingServer,
    catFile,
    copyFile,
    cleanup,
    raw,
  } = c;
  progress('s6 on the real network: starting Dragonfly (manager, scheduler, seed peer, node peer)');
  const network = await startDragonfly({ nodePeers: 1 });
  cleanup.push(() => network.stop());
  const nodePeer = network.peers[0]!;
  const seedPeer = network.seedPeer!;
  progress('s6 on the real network: starting a TorchServe as a non-root user for the hard-linked case');
  const linking = await linkingServer();
  const r = {
    direct: [] as PluginRun[],
    cold: [] as PluginRun[],
    remote: [] as PluginRun[],
    local: [] as PluginRun[],
    localWarm: [] as PluginRun[],
    hardLink: [] as PluginRun[],
    /** Cold start with hard_link_dir: the archive is the daemon's file as it fills it (no write of its own). */
    hardLinkCold: [] as PluginRun[],
    disk: [] as number[],
    copy: [] as number[],
    /** curl into the model store: direct (the forwarder) and a cold start through the node peer. */
    curlDirect: [] as number[],
    curlCold: [] as number[],
    /** One fetch written three times on this disk (threeCopies): a cold start's physical floor here. */
    threeCopies: [] as number[],
    /** The same fetch written twice (the seed peer's file, the node peer's file): the hard-linked cold start's floor. */
    twoCopies: [] as number[],
  };
  /** The node peer's file of a task (dfdaemon 1.4 stores content under <storage>/content/tasks/<id[..3]>/<id>). */
  const cachedFile = async (task: string) => {
    const { stdout } = await run('find', [nodePeer.storageDir, '-type', 'f', '-name', `${task}*`]);
    const files = stdout.trim().split('\n').filter(Boolean);
    const big = [];
    for (const f of files) if ((await stat(f)).size === size) big.push(f);
    if (big.length !== 1)
      throw new Error(`task ${task}: ${big.length} cached files of ${size} bytes on the node peer`);
    return big[0]!;
  };
  /**
   * The same download without the plugin: curl through `proxy` into the model store's directory, with the
   * headers the plugin sends (P2P asked for, the filter, the tag), so a miss can be told apart: the plugin's
   * or the network's.
   */
  const curlToStore = async (proxy: string, headers: Record<string, string>): Promise<number> => {
    const dst = join(modelStore, '.bench-curl');
    settleDisk();
    const h = Object.entries({
      'X-Dragonfly-Use-P2P': 'true',
      'X-Dragonfly-Filtered-Query-Params': filter.join(','),
      ...headers,
    }).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
    const t0 = performance.now();
    await run('curl', ['-sS', '--fail', '-x', proxy, '-o', dst, ...h, signedURL], { timeout: 600_000 });
    const ms = performance.now() - t0;
    const n = (await stat(dst)).size;
    await unlink(dst);
    if (n !== size) throw new Error(`curl wrote ${n} of ${size} bytes`);
    return ms;
  };
  /**
   * The least a cold start through two peers must do on ONE machine: fetch the object once and write it where the
   * peers and the model store keep it, on the one disk they share here — on a cluster the peers' writes land on
   * other machines' disks. Three places for a streamed archive (the seed peer's file, the node peer's file, the
   * archive); two when the archive is the node peer's file, hard-linked. curl from the direct forwarder piped
   * through tee into those places.
   */
  const copies = async (places: 2 | 3): Promise<number> => {
    const dsts = [
      join(seedPeer.storageDir, '.bench-copy'),
      join(nodePeer.storageDir, '.bench-copy'),
      join(modelStore, '.bench-copy'),
    ].slice(0, places);
    const outputs = dsts
      .slice(0, -1)
      .map((_, i) => `"\${${i + 4}}"`)
      .join(' ');
    settleDisk();
    const t0 = performance.now();
    await run(
      'bash',
      [
        '-c',
        `set -o pipefail; curl -sS --fail -x "$1" -H "$2" "$3" | tee ${outputs} > "\${${places + 3}}"`,
        'copies',
        directURL,
        'X-Dragonfly-Use-P2P: true',
        signedURL,
        ...dsts,
      ],
      { timeout: 600_000 },
    );
    const ms = performance.now() - t0;
    for (const d of dsts) {
      const n = (await stat(d)).size;
      await unlink(d);
      if (n !== size) throw new Error(`${places} copies: ${d} has ${n} of ${size} bytes`);
    }
    return ms;
  };
  for (let rep = 0; rep < reps; rep++) {
    const tag = (what: string) => ({ 'X-Dragonfly-Tag': `bench-${Date.now()}-${rep}-${what}` });
    await setAddr(directURL);
    r.direct.push(await pluginRun(false));
    await setAddr(nodePeer.proxyURL, tag('cold'));
    r.cold.push(await pluginRun(false));
    r.curlDirect.push(await curlToStore(directURL, {}));
    r.curlCold.push(await curlToStore(nodePeer.proxyURL, tag('curl-cold')));
    r.threeCopies.push(await copies(3));
    // Remote hit: the seed peer downloads the task first (through its own proxy), the node peer has nothing.
    const remoteTag = tag('remote');
    await run(
      'curl',
      [
        '-sS',
        '--fail',
        '-x',
        seedPeer.proxyURL,
        '-o',
        '/dev/null',
        '-H',
        'X-Dragonfly-Use-P2P: true',
        '-H',
        `X-Dragonfly-Filtered-Query-Params: ${filter.join(',')}`,
        '-H',
        `X-Dragonfly-Tag: ${remoteTag['X-Dragonfly-Tag']}`,
        signedURL,
      ],
      { timeout: 600_000 },
    );
    await setAddr(nodePeer.proxyURL, remoteTag);
    const remote = await pluginRun(false);
    if (remote.localHit !== false)
      throw new Error(`the remote-hit case was a local hit (${JSON.stringify(remote)})`);
    r.remote.push(remote);
    // Local hit: the node peer now holds it; measured with its file in the page cache and evicted.
    const file = await cachedFile(remote.taskID!);
    const warm = await pluginRun(false);
    if (warm.localHit !== true)
      throw new Error(`the local-hit case was not a local hit (${JSON.stringify(warm)})`);
    r.localWarm.push(warm);
    evictFromPageCache(file);
    r.local.push(await pluginRun(false));
    evictFromPageCache(file);
    r.disk.push(catFile(file));
    evictFromPageCache(file);
    r.copy.push(copyFile(file));
    // Local hit, hard link: the daemon links its file into the non-root TorchServe's model store (same file
    // system), nothing is read. Its first registration, in a fresh JVM, runs interpreted: one unmeasured first.
    await setAddr(nodePeer.proxyURL, remoteTag, { hard_link_dir: linking.modelStore });
    if (rep === 0) {
      const warmUp = await linking.pluginRun(false);
      if (warmUp.hardLink !== true)
        throw new Error(`the hard-link warm-up was not a hard link (${JSON.stringify(warmUp)})`);
    }
    evictFromPageCache(file);
    const linked = await linking.pluginRun(false);
    if (linked.hardLink !== true)
      throw new Error(`the hard-link case was not a hard link (${JSON.stringify(linked)})`);
    r.hardLink.push(linked);
    // Cold start, hard link: the daemon links the file it allocates and fills; the plugin reads the body without
    // writing it. The first one of this JVM runs that path interpreted: one unmeasured first.
    if (rep === 0) {
      await setAddr(nodePeer.proxyURL, tag('cold-link-warm-up'), { hard_link_dir: linking.modelStore });
      const warmUp = await linking.pluginRun(false);
      if (warmUp.hardLink !== true || warmUp.localHit !== false)
        throw new Error(`the cold hard-link warm-up was not a cold hard link (${JSON.stringify(warmUp)})`);
    }
    await setAddr(nodePeer.proxyURL, tag('cold-link'), { hard_link_dir: linking.modelStore });
    const coldLinked = await linking.pluginRun(false);
    if (coldLinked.hardLink !== true || coldLinked.localHit !== false)
      throw new Error(`the cold hard-link case was not a cold hard link (${JSON.stringify(coldLinked)})`);
    r.hardLinkCold.push(coldLinked);
    r.twoCopies.push(await copies(2));
    progress(
      `s6 real rep ${rep + 1}: direct ${r.direct.at(-1)!.downloadMs.toFixed(0)} ms, cold ${r.cold.at(-1)!.downloadMs.toFixed(0)} ms ` +
        `(curl: direct ${r.curlDirect.at(-1)!.toFixed(0)} ms, cold ${r.curlCold.at(-1)!.toFixed(0)} ms; three copies ${r.threeCopies.at(-1)!.toFixed(0)} ms), ` +
        `remote ${remote.downloadMs.toFixed(0)} ms, local ${r.local.at(-1)!.downloadMs.toFixed(0)} ms ` +
        `(page-cached ${warm.downloadMs.toFixed(0)} ms), hard link ${linked.downloadMs.toFixed(0)} ms; disk read ${r.disk.at(-1)!.toFixed(0)} ms, bare copy ${r.copy.at(-1)!.toFixed(0)} ms; ` +
        `cold start as a hard link ${coldLinked.downloadMs.toFixed(0)} ms, two copies ${r.twoCopies.at(-1)!.toFixed(0)} ms`,
    );
  }
  const secs = (runs: PluginRun[]) => stats(runs.map((x) => x.downloadMs / 1000));
  const scenario = `cache scenarios on the REAL Dragonfly network (v2.5.1, dfdaemon 1.4.2), ${(size / MiB).toFixed(0)} MiB through the plugin`;
  const coldVsDirect = stats(r.cold.map((x, i) => x.downloadMs / r.direct[i]!.downloadMs));
  const localVsCopy = stats(r.local.map((x, i) => r.copy[i]! / x.downloadMs));
  const linkVsDisk = stats(r.hardLink.map((x, i) => r.disk[i]! / x.downloadMs));
  const coldLinkVsFloor = stats(r.hardLinkCold.map((x, i) => x.downloadMs / r.twoCopies[i]!));
  raw['s6real'] = r;
  return [
    {
      id: '6e',
      scenario,
      metric: 'direct signed-URL download (forwarder, no P2P)',
      unit: 's',
      value: secs(r.direct),
      reference: stats(r.disk.map((x) => x / 1000)),
      referenceLabel: '(disk read of the node peer file, evicted)',
      ratio: stats(r.direct.map((x, i) => x.downloadMs / r.disk[i]!)),
      target: 'relative time reported',
    },
    {
      id: '6f',
      scenario,
      metric: 'P2P cold start: node peer → seed peer → origin, no cache',
      unit: 's',
      value: secs(r.cold),
      reference: secs(r.direct),
      referenceLabel: '(direct, 6e)',
      ratio: coldVsDirect,
      target: '≤ 1.1× direct',
      pass: coldVsDirect.median <= 1.1,
      notes: `without the plugin (curl into the model store, same headers): direct ${stats(r.curlDirect.map((x) => x / 1000)).median.toFixed(2)} s, cold ${stats(r.curlCold.map((x) => x / 1000)).median.toFixed(2)} s, cold/direct ${stats(r.curlCold.map((x, i) => x / r.curlDirect[i]!)).median.toFixed(2)}×; plugin/curl: direct ${stats(r.direct.map((x, i) => x.downloadMs / r.curlDirect[i]!)).median.toFixed(2)}×, cold ${stats(r.cold.map((x, i) => x.downloadMs / r.curlCold[i]!)).median.toFixed(2)}×; one fetch written three times on this disk (seed file, node file, archive: the floor of a cold start with both peers on one machine) ${stats(r.threeCopies.map((x) => x / 1000)).median.toFixed(2)} s, cold / that ${stats(r.cold.map((x, i) => x.downloadMs / r.threeCopies[i]!)).median.toFixed(2)}×`,
    },
    {
      id: '6g',
      scenario,
      metric: 'hit on a remote peer (the seed peer holds it)',
      unit: 's',
      value: secs(r.remote),
      reference: secs(r.direct),
      referenceLabel: '(direct, 6e)',
      ratio: stats(r.remote.map((x, i) => x.downloadMs / r.direct[i]!.downloadMs)),
      target: 'relative time reported',
    },
    {
      id: '6h',
      scenario,
      metric: 'hit on the local peer (its file on disk, evicted from the page cache)',
      unit: 's',
      value: secs(r.local),
      reference: stats(r.copy.map((x) => x / 1000)),
      referenceLabel: '(bare copy of the peer file into the model store, evicted: the physical limit)',
      ratio: localVsCopy,
      target: '≥ 0.8× the bare copy (speed)',
      pass: localVsCopy.median >= 0.8,
      notes: `page-cached local hit ${stats(r.localWarm.map((x) => x.downloadMs / 1000)).median.toFixed(2)} s; disk read ${stats(r.disk.map((x) => x / 1000)).median.toFixed(2)} s`,
    },
    {
      id: '6i',
      scenario,
      metric:
        'local hit, hard link (plugin hard_link_dir: the daemon links its file into the model store of a non-root TorchServe)',
      unit: 's',
      value: secs(r.hardLink),
      reference: stats(r.disk.map((x) => x / 1000)),
      referenceLabel: '(disk read of the node peer file, evicted)',
      ratio: linkVsDisk,
      target: '≥ 10× faster than the disk read',
      pass: linkVsDisk.median >= 10,
      notes: `registration included: ${stats(r.hardLink.map((x) => x.totalMs / 1000)).median.toFixed(2)} s`,
    },
    {
      id: '6j',
      scenario,
      metric:
        'P2P cold start with hard_link_dir (non-root TorchServe): the archive is the node peer file the daemon fills, the body read, not written',
      unit: 's',
      value: secs(r.hardLinkCold),
      reference: stats(r.twoCopies.map((x) => x / 1000)),
      referenceLabel: '(one fetch written twice on this disk: the seed peer file and the node peer file)',
      ratio: coldLinkVsFloor,
      target: '≤ 1.1× that floor',
      pass: coldLinkVsFloor.median <= 1.1,
      notes: `against direct (6e, info): ${stats(r.hardLinkCold.map((x, i) => x.downloadMs / r.direct[i]!.downloadMs)).median.toFixed(2)}×; streamed cold start (6f) ${secs(r.cold).median.toFixed(2)} s against three copies ${stats(r.threeCopies.map((x) => x / 1000)).median.toFixed(2)} s; registration included: ${stats(r.hardLinkCold.map((x) => x.totalMs / 1000)).median.toFixed(2)} s`,
    },
  ];
}
