/**
 * A local hit that costs no copy, on the REAL Dragonfly network (dfdaemon 1.4.2, the run's shared one:
 * test/support/shared-dragonfly.ts): TorchServe with the plugin configured with `hard_link_dir`, its model store on the same file system as its node
 * peer's storage. TorchServe runs as a non-root user (uid/gid 1000) with no capabilities, as the `restricted` Pod
 * Security level has it; the daemon runs as root (the test process), so its cache file is root's, 0644.
 *   - what the daemon itself does with `X-Dragonfly-Output-Path` + `X-Dragonfly-Force-Hard-Link: true` for a task
 *     it does not hold (links a file it has only allocated) and across file systems (500, error type dfdaemon);
 *   - a cold registration takes the daemon's file it links and fills: the body is read, not written, and the
 *     archive is the daemon's inode with the origin's bytes;
 *   - the daemon links a task it holds with the mode it created its file with (no group or others write), and
 *     there is no way to ask it for anything else;
 *   - the next registrations of the same object are hard links: the archive in the model store is the daemon's
 *     inode, which TorchServe's user cannot write; the model registers from it, and the daemon's
 *     file is byte for byte, mode and time what it was;
 *   - a TorchServe running as root (which could write the daemon's file through a link, or make it writable) is
 *     never given the daemon's file: it streams, says why in its log, and leaves the daemon's file as it was;
 *   - `max_bytes` below the held task's size is a 413 that leaves no link of the daemon's file behind;
 *   - a `hard_link_dir` on another file system, or one the daemon does not have, falls back and still registers.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { request } from 'node:http';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { DragonflyPeerView, DragonflyView } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildLargeModelArchive, buildModelArchive, type ModelArchive } from '../support/model-archive.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';

const BUCKET = fileBucket('models');
const KEY = 'hl/linked.mar';
/** Objects for the daemon-only probes: each is a task the daemon does not hold when it is first asked for. */
const COLD_KEY = 'hl/cold.mar';
const XDEV_KEY = 'hl/xdev.mar';
/** A file system other than the one of the daemon's storage (tmpfs here; the storage is under the temp dir). */
const OTHER_FS = '/dev/shm';
/** TorchServe's user: not root, not the daemon's (root here), no capabilities. */
const TS_USER = { uid: 1000, gid: 1000 };
const run = promisify(execFile);

let network: DragonflyView;
let peer: DragonflyPeerView;
let minio: MinIO;
let ts: TorchServe;
let work: string;
let otherFs: string;
let archive: ModelArchive;
let configPath: string;
let jar: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'peerload-hardlink-'));
  // TorchServe's user must reach its model store and read the plugin's configuration in here (0644).
  await chmod(work, 0o711);
  otherFs = await mkdtemp(join(OTHER_FS, 'peerload-hardlink-'));
  const jarPromise = pluginJar();
  network = await sharedDragonfly(inject('dragonflyService'), 1);
  peer = network.peers[0]!;
  // Its own MinIO (its own port): its URLs, so its task ids, are this file's alone on the shared network.
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
  jar = await jarPromise;
  ts = await startTorchServe({
    pluginJars: [jar],
    env: { P2P_ENDPOINT_CONFIG: configPath },
    modelStore,
    runAs: TS_USER,
  });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await Promise.allSettled([ts?.stop(), minio?.stop()]);
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

/** GETs an object through the node peer's proxy as the plugin does (the tag its credentials give the task
 *  included, so a task the plugin fetched is this one), with extra headers. */
async function throughProxy(key: string, headers: Record<string, string>): Promise<ProxyAnswer> {
  const location = minio.location(BUCKET);
  const { url } = await signObjectURL(location, key, minio.credentials(), { expiresSeconds: 600 });
  const tag = credentialTag(location, minio.credentials());
  const proxy = new URL(peer.proxyURL);
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy.hostname,
        port: proxy.port,
        path: url,
        headers: {
          host: new URL(url).host,
          'X-Dragonfly-Use-P2P': 'true',
          'X-Dragonfly-Tag': tag,
          ...headers,
        },
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

async function register(
  modelName: string,
  server: TorchServe = ts,
): Promise<{ status: number; body: PluginAnswer; ms: number }> {
  const start = performance.now();
  const res = await fetch(
    `${server.managementURL}/p2p/models?file_name=${encodeURIComponent(KEY)}&model_name=${modelName}`,
    { method: 'POST', headers: server.managementAuth() },
  );
  return { status: res.status, body: (await res.json()) as PluginAnswer, ms: performance.now() - start };
}

async function isRegistered(modelName: string, server: TorchServe = ts): Promise<boolean> {
  const res = await fetch(`${server.managementURL}/models/${modelName}`, {
    headers: server.managementAuth(),
  });
  await res.arrayBuffer();
  return res.status === 200;
}

/**
 * Nothing but archives (and the plugin's record of which object each holds) in the model store: no link, temporary
 * or partial file is ever left behind.
 */
async function strayFiles(server: TorchServe = ts): Promise<string[]> {
  return (await readdir(server.modelStore)).filter((n) => n.startsWith('.') && !n.startsWith('.p2p-object.'));
}

/** Where the frontend's log ends now: its length in each of its files. */
type LogMark = number[];

/**
 * The frontend's log, and its standard output (where TorchServe's log4j configuration sends the root logger too);
 * with `since`, only what was written after that mark.
 */
async function frontendLog(server: TorchServe, since?: LogMark): Promise<string> {
  const files = [join(server.logsDir, 'ts_log.log'), server.logPath];
  const texts = await Promise.all(files.map((f) => readFile(f).catch(() => Buffer.alloc(0))));
  return texts.map((t, i) => t.subarray(since?.[i] ?? 0).toString('utf8')).join('\n');
}

async function frontendLogMark(server: TorchServe): Promise<LogMark> {
  const files = [join(server.logsDir, 'ts_log.log'), server.logPath];
  return Promise.all(
    files.map((f) =>
      stat(f).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
}

/** What identifies the daemon's file and what it holds: the same after the model is used as before. */
async function fingerprint(path: string) {
  const s = await stat(path);
  return {
    ino: s.ino,
    uid: s.uid,
    mode: s.mode,
    size: s.size,
    mtimeMs: s.mtimeMs,
    sha256: createHash('sha256')
      .update(await readFile(path))
      .digest('hex'),
  };
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
    const output = join(otherFs, 'x.bin');
    const refused = await throughProxy(XDEV_KEY, {
      'X-Dragonfly-Output-Path': output,
      'X-Dragonfly-Force-Hard-Link': 'true',
    });
    expect(refused.status).toBe(500);
    expect(refused.headers['x-dragonfly-error-type']).toBe('dfdaemon');
    expect(refused.body.length).toBe(0);
    // The daemon's line for this output path (its log holds the other files' links too).
    const line = (await peer.logs()).split('\n').filter((l) => l.includes(output));
    expect(line.join('\n')).toMatch(/hard link .* failed: .*(cross-device|os error 18)/i);
    const plain = await throughProxy(XDEV_KEY, {});
    expect(plain.status).toBe(200);
    expect(Buffer.compare(plain.body, await readFile(archive.path))).toBe(0);
  });

  let taskId: string;

  it('a cold registration is the file the daemon fills: not a local hit, a hard link, nothing written of its own', async () => {
    const r = await register('linked_cold');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ LocalHit: false, HardLink: true });
    taskId = r.body.TaskID!;
    const archivePath = join(ts.modelStore, 'linked.mar');
    const [archiveStat, daemonStat] = await Promise.all([stat(archivePath), stat(await daemonFile(taskId))]);
    expect(archiveStat.ino).toBe(daemonStat.ino);
    expect(archiveStat.uid).toBe(0); // the daemon's (root's) file, not one TorchServe's user wrote
    expect(Buffer.compare(await readFile(archivePath), await readFile(archive.path))).toBe(0);
    expect(await strayFiles()).toEqual([]);
    expect(await isRegistered('linked_cold')).toBe(true);
  });

  it('the daemon links a task it holds as its own file, with the mode it created it with', async () => {
    const out = join(ts.modelStore, '.p2p-probe.link');
    const a = await throughProxy(KEY, {
      'X-Dragonfly-Output-Path': out,
      'X-Dragonfly-Force-Hard-Link': 'true',
    });
    expect(a.status).toBe(200);
    expect(a.headers['x-dragonfly-task-download-finished']).toBe('true');
    const [o, d] = await Promise.all([stat(out), stat(await daemonFile(taskId))]);
    expect(o.ino).toBe(d.ino);
    // File::create (0666) less the umask the daemon inherits from this process: the daemon sets no mode of its own.
    const umask = parseInt(/^Umask:\s*([0-7]+)$/m.exec(await readFile('/proc/self/status', 'utf8'))![1]!, 8);
    expect(d.mode & 0o777).toBe(0o666 & ~umask);
    expect(o.uid).toBe(d.uid);
    await rm(out);
  });

  it('TorchServe as a non-root user without capabilities: the next registrations are the daemon file, and serve', async () => {
    // The frontend runs as TS_USER with no capabilities at all (and its workers, its children, inherit that).
    const status = await readFile(`/proc/${ts.pid}/status`, 'utf8');
    expect(status).toMatch(
      new RegExp(`^Uid:\\s+${TS_USER.uid}\\s+${TS_USER.uid}\\s+${TS_USER.uid}\\s+${TS_USER.uid}$`, 'm'),
    );
    expect(status).toMatch(/^CapEff:\s+0+$/m);
    const daemonPath = await daemonFile(taskId);
    const before = await fingerprint(daemonPath);
    expect(before.uid).toBe(0); // the daemon's (root's), not TorchServe's
    expect(before.mode & 0o022).toBe(0); // no group or others write
    // What these registrations log starts here (the cold one above logged its own line).
    const mark = await frontendLogMark(ts);
    for (const name of ['linked_hl', 'linked_hl_again']) {
      const r = await register(name);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      // The second one shows that leaving the body unread keeps the daemon's task finished.
      expect(r.body).toMatchObject({ TaskID: taskId, LocalHit: true, HardLink: true });
      const [archiveStat, daemonStat] = await Promise.all([
        stat(join(ts.modelStore, 'linked.mar')),
        stat(daemonPath),
      ]);
      expect(archiveStat.ino).toBe(daemonStat.ino);
      // The daemon's own name and the archive, at least (the previous archive's link is replaced, not kept).
      expect(archiveStat.nlink).toBeGreaterThanOrEqual(2);
      expect(daemonStat.mode).toBe(before.mode); // the plugin never changes the daemon's file
      expect(daemonStat.uid).toBe(0);
      expect(await strayFiles()).toEqual([]);
      expect(await isRegistered(name)).toBe(true);
      console.log(`[hardlink] ${name}: registered from a hard link in ${r.ms.toFixed(0)} ms`);
    }
    // TorchServe's user cannot write the archive it was given (the daemon's file), nor make it writable.
    const archivePath = join(ts.modelStore, 'linked.mar');
    const asTsUser = (script: string) =>
      run('setpriv', [
        `--reuid=${TS_USER.uid}`,
        `--regid=${TS_USER.gid}`,
        '--clear-groups',
        '--inh-caps=-all',
        '--',
        'sh',
        '-c',
        script,
        'sh',
        archivePath,
      ]);
    await expect(asTsUser('printf x >> "$1"')).rejects.toThrow(/Permission denied/);
    await expect(asTsUser('chmod a+w "$1"')).rejects.toThrow(/Operation not permitted/);
    // The registration itself read the linked archive (TorchServe unpacks it to register). No worker is started
    // here: a worker of this TorchServe runs the cached Python interpreter as uid 1000, and where that interpreter
    // lives under a home only root may enter (pyenv in /root on these machines) it cannot start; the root
    // TorchServe of the other tests starts workers from the same archives.
    // The daemon's file after all that: the same inode, owner, mode, size, time and bytes, still what the origin has.
    const after = await fingerprint(daemonPath);
    expect(after).toEqual(before);
    expect(after.sha256).toBe(
      createHash('sha256')
        .update(await readFile(archive.path))
        .digest('hex'),
    );
    const logged = await frontendLog(ts, mark);
    // One line per registration (each file of the log carries it: the distinct lines are counted).
    const linkedLines = new Set(
      logged.split('\n').filter((l) => /linked\.mar is a hard link of the peer daemon's copy/.test(l)),
    );
    expect(linkedLines.size).toBe(2);
    expect(logged).not.toMatch(/linked\.mar was streamed, not hard-linked/);
  });

  it("a TorchServe running as root (the daemon's user here) is never given the daemon's file: it streams", async () => {
    const daemonPath = await daemonFile(taskId);
    const before = await stat(daemonPath);
    const rootWork = await mkdtemp(join(work, 'root-ts-'));
    const rootStore = join(rootWork, 'model-store');
    await mkdir(rootStore);
    const rootConfig = join(rootWork, 'p2p-endpoint.json');
    await writePluginConfig(
      rootConfig,
      minioPluginConfig(minio, BUCKET, peer.proxyURL, { hard_link_dir: rootStore }),
    );
    const rootTs = await startTorchServe({
      pluginJars: [jar],
      env: { P2P_ENDPOINT_CONFIG: rootConfig },
      modelStore: rootStore,
    });
    try {
      expect(rootTs.uid).toBe(0);
      for (const name of ['linked_root', 'linked_root_again']) {
        const r = await register(name, rootTs);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        expect(r.body).toMatchObject({ TaskID: taskId, LocalHit: true, HardLink: false });
        const [archiveStat, daemonStat] = await Promise.all([
          stat(join(rootStore, 'linked.mar')),
          stat(daemonPath),
        ]);
        expect(archiveStat.ino).not.toBe(daemonStat.ino);
        expect(daemonStat.mode).toBe(before.mode); // the plugin never changes the daemon's file
        expect(daemonStat.nlink).toBe(before.nlink); // and leaves no link of it behind
        expect(
          Buffer.compare(await readFile(join(rootStore, 'linked.mar')), await readFile(archive.path)),
        ).toBe(0);
        expect(await strayFiles(rootTs)).toEqual([]);
        expect(await isRegistered(name, rootTs)).toBe(true);
      }
      expect(await frontendLog(rootTs)).toMatch(
        /linked\.mar was streamed, not hard-linked: the model server runs with CAP_DAC_OVERRIDE/,
      );
    } finally {
      await rootTs.stop();
    }
  });

  it('max_bytes below a task the daemon holds: 413 before its link is used, and no link of it is left', async () => {
    const daemonPath = await daemonFile(taskId);
    const before = await stat(daemonPath);
    const archiveBefore = await stat(join(ts.modelStore, 'linked.mar'));
    const storeBefore = (await readdir(ts.modelStore)).sort();
    await writePluginConfig(
      configPath,
      minioPluginConfig(minio, BUCKET, peer.proxyURL, { hard_link_dir: ts.modelStore, max_bytes: 1 << 20 }),
    );
    try {
      const r = await register('linked_too_large');
      expect(r.status, JSON.stringify(r.body)).toBe(413);
      expect(r.body.Status).toMatch(/is larger than max_bytes \(1048576 bytes\)/);
      expect(await isRegistered('linked_too_large')).toBe(false);
      // The daemon made its link before answering: the plugin removed it, and the archive in place is untouched.
      expect((await readdir(ts.modelStore)).sort()).toEqual(storeBefore);
      expect((await stat(daemonPath)).nlink).toBe(before.nlink);
      const archiveAfter = await stat(join(ts.modelStore, 'linked.mar'));
      expect([archiveAfter.ino, archiveAfter.mtimeMs]).toEqual([archiveBefore.ino, archiveBefore.mtimeMs]);
    } finally {
      await writePluginConfig(
        configPath,
        minioPluginConfig(minio, BUCKET, peer.proxyURL, { hard_link_dir: ts.modelStore }),
      );
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
