/**
 * A local hit that costs no copy, on the REAL Dragonfly network (dfdaemon 1.4.2, test/support/dragonfly.ts):
 * TorchServe with the plugin configured with `hard_link_dir`, its model store on the same file system as its node
 * peer's storage.
 *   - what the daemon itself does with `X-Dragonfly-Output-Path` + `X-Dragonfly-Force-Hard-Link: true` for a task
 *     it does not hold (links a file it has only allocated) and across file systems (500, error type dfdaemon);
 *   - a cold registration streams (nothing of the daemon's half-filled file is taken);
 *   - the next registrations of the same object are hard links: the archive in the model store is the daemon's
 *     inode, and the model registers;
 *   - a `hard_link_dir` on another file system, or one the daemon does not have, falls back and still registers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { mkdir, mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDragonfly, type Dragonfly, type DragonflyPeer } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildLargeModelArchive, buildModelArchive, type ModelArchive } from '../support/model-archive.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { signObjectURL } from '../../src/storage/sign.ts';

const BUCKET = 'models';
const KEY = 'hl/linked.mar';
/** Objects for the daemon-only probes: each is a task the daemon does not hold when it is first asked for. */
const COLD_KEY = 'hl/cold.mar';
const XDEV_KEY = 'hl/xdev.mar';
/** A file system other than the one of the daemon's storage (tmpfs here; the storage is under the temp dir). */
const OTHER_FS = '/dev/shm';

let network: Dragonfly;
let peer: DragonflyPeer;
let minio: MinIO;
let ts: TorchServe;
let work: string;
let otherFs: string;
let archive: ModelArchive;
let configPath: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'peerload-hardlink-'));
  otherFs = await mkdtemp(join(OTHER_FS, 'peerload-hardlink-'));
  const jarPromise = pluginJar();
  network = await startDragonfly({ nodePeers: 1 });
  peer = network.peers[0]!;
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  // Above dfdaemon 1.4's 4 MiB direct-from-origin threshold, so the task is stored and scheduled as a model is.
  const base = await buildModelArchive(work, { modelName: 'linked-base' });
  archive = await buildLargeModelArchive(base, work, 'linked', 6 << 20);
  const bytes = await readFile(archive.path);
  for (const key of [KEY, COLD_KEY, XDEV_KEY]) await minio.putObject(BUCKET, key, bytes);

  // The model store sits on the file system of the daemon's storage, as a node volume shared by both pods does.
  const modelStore = join(work, 'model-store');
  await mkdir(modelStore);
  configPath = join(work, 'p2p-endpoint.json');
  await writePluginConfig(
    configPath,
    minioPluginConfig(minio, BUCKET, peer.proxyURL, { hard_link_dir: modelStore }),
  );
  ts = await startTorchServe({
    pluginJars: [await jarPromise],
    env: { P2P_ENDPOINT_CONFIG: configPath },
    modelStore,
  });
}, 1_800_000);

afterAll(async () => {
  await Promise.allSettled([ts?.stop(), minio?.stop()]);
  await network?.stop();
  if (work) await rm(work, { recursive: true, force: true });
  if (otherFs) await rm(otherFs, { recursive: true, force: true });
});

interface ProxyAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** Milliseconds from the request to the response head. */
  headMs: number;
}

/** GETs an object through the node peer's proxy as the plugin does, with extra headers. */
async function throughProxy(key: string, headers: Record<string, string>): Promise<ProxyAnswer> {
  const { url } = await signObjectURL(minio.location(BUCKET), key, minio.credentials(), {
    expiresSeconds: 600,
  });
  const proxy = new URL(peer.proxyURL);
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy.hostname,
        port: proxy.port,
        path: url,
        headers: { host: new URL(url).host, 'X-Dragonfly-Use-P2P': 'true', ...headers },
      },
      (res) => {
        const headMs = performance.now() - start;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), headMs }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** The daemon's own copy of a task: `<storage>/content/tasks/<first 3>/<task id>`, found by name. */
async function daemonFile(taskId: string): Promise<string> {
  const entries = await readdir(peer.storageDir, { recursive: true, withFileTypes: true });
  const hit = entries.find((e) => e.isFile() && e.name === taskId);
  if (!hit) throw new Error(`no file named ${taskId} under ${peer.storageDir}`);
  return join(hit.parentPath, hit.name);
}

interface PluginAnswer {
  Status: string;
  TaskID?: string;
  LocalHit?: boolean;
  HardLink?: boolean;
}

async function register(modelName: string): Promise<{ status: number; body: PluginAnswer; ms: number }> {
  const start = performance.now();
  const res = await fetch(
    `${ts.managementURL}/p2p/models?file_name=${encodeURIComponent(KEY)}&model_name=${modelName}`,
    { method: 'POST', headers: ts.managementAuth() },
  );
  return { status: res.status, body: (await res.json()) as PluginAnswer, ms: performance.now() - start };
}

async function isRegistered(modelName: string): Promise<boolean> {
  const res = await fetch(`${ts.managementURL}/models/${modelName}`, { headers: ts.managementAuth() });
  await res.arrayBuffer();
  return res.status === 200;
}

/** Nothing but archives in the model store: no link, temporary or partial file is ever left behind. */
async function strayFiles(): Promise<string[]> {
  return (await readdir(ts.modelStore)).filter((n) => n.startsWith('.'));
}

describe('hard-linked local hits on the real network (dfdaemon 1.4.2)', () => {
  it('the daemon links even a task it does not hold yet: an allocated file, filled as the download goes', async () => {
    const out = join(work, 'cold-probe.bin');
    const a = await throughProxy(COLD_KEY, {
      'X-Dragonfly-Output-Path': out,
      'X-Dragonfly-Force-Hard-Link': 'true',
    });
    expect(a.status).toBe(200);
    expect(a.headers['x-dragonfly-task-download-finished']).toBeUndefined();
    const taskId = a.headers['x-dragonfly-task-id'] as string;
    expect(taskId).toMatch(/^[0-9a-f]{64}$/);
    // The output is the daemon's inode: after the whole body it holds the object.
    const [o, d] = await Promise.all([stat(out), stat(await daemonFile(taskId))]);
    expect(o.ino).toBe(d.ino);
    expect(Buffer.compare(await readFile(out), await readFile(archive.path))).toBe(0);
    expect(a.body.length).toBe(o.size);
  });

  it('across file systems the daemon refuses (500, dfdaemon) and a plain request still downloads', async () => {
    const refused = await throughProxy(XDEV_KEY, {
      'X-Dragonfly-Output-Path': join(otherFs, 'x.bin'),
      'X-Dragonfly-Force-Hard-Link': 'true',
    });
    expect(refused.status).toBe(500);
    expect(refused.headers['x-dragonfly-error-type']).toBe('dfdaemon');
    expect(refused.body.length).toBe(0);
    expect(await peer.logs()).toMatch(/hard link .* failed: .*(cross-device|os error 18)/i);
    const plain = await throughProxy(XDEV_KEY, {});
    expect(plain.status).toBe(200);
    expect(Buffer.compare(plain.body, await readFile(archive.path))).toBe(0);
  });

  let taskId: string;

  it('a cold registration streams the archive: not a local hit, not a hard link, nothing left over', async () => {
    const r = await register('linked_cold');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ LocalHit: false, HardLink: false });
    taskId = r.body.TaskID!;
    const [archiveStat, daemonStat] = await Promise.all([
      stat(join(ts.modelStore, 'linked.mar')),
      stat(await daemonFile(taskId)),
    ]);
    expect(archiveStat.size).toBe(daemonStat.size);
    expect(archiveStat.ino).not.toBe(daemonStat.ino);
    expect(await strayFiles()).toEqual([]);
    expect(await isRegistered('linked_cold')).toBe(true);
  });

  it('the next registrations of the same object are hard links of the daemon file, and register', async () => {
    for (const name of ['linked_hl', 'linked_hl_again']) {
      const r = await register(name);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      // The second one shows that leaving the body unread keeps the daemon's task finished.
      expect(r.body).toMatchObject({ TaskID: taskId, LocalHit: true, HardLink: true });
      const [archiveStat, daemonStat] = await Promise.all([
        stat(join(ts.modelStore, 'linked.mar')),
        stat(await daemonFile(taskId)),
      ]);
      expect(archiveStat.ino).toBe(daemonStat.ino);
      expect(archiveStat.nlink).toBeGreaterThanOrEqual(2);
      expect(await strayFiles()).toEqual([]);
      expect(await isRegistered(name)).toBe(true);
      console.log(`[hardlink] ${name}: registered from a hard link in ${r.ms.toFixed(0)} ms`);
    }
  });

  it('a hard_link_dir on another file system, or absent for the daemon, falls back and registers', async () => {
    const cases = [
      { dir: otherFs, name: 'linked_xdev' },
      { dir: join(work, 'no-such-dir'), name: 'linked_nodir' },
    ];
    for (const { dir, name } of cases) {
      await writePluginConfig(
        configPath,
        minioPluginConfig(minio, BUCKET, peer.proxyURL, { hard_link_dir: dir }),
      );
      const r = await register(name);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body).toMatchObject({ TaskID: taskId, LocalHit: true, HardLink: false });
      const [archiveStat, daemonStat] = await Promise.all([
        stat(join(ts.modelStore, 'linked.mar')),
        stat(await daemonFile(taskId)),
      ]);
      expect(archiveStat.ino).not.toBe(daemonStat.ino);
      expect(
        Buffer.compare(await readFile(join(ts.modelStore, 'linked.mar')), await readFile(archive.path)),
      ).toBe(0);
      expect(await readdir(dir).catch(() => [])).toEqual([]);
      expect(await strayFiles()).toEqual([]);
      expect(await isRegistered(name)).toBe(true);
    }
  });
});
