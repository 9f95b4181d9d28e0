/**
 * The images of scripts/build-cluster-images.sh, checked without a cluster: each archive names its image as the
 * container runtime will look it up; no binary of an image misses a shared library inside the image's own root
 * (the loader of the image, `--list`); and each image does its job through `buildah run`, as the kubelet would run
 * it (host network, the user and mounts of the manifests):
 *   - busybox runs the init container commands of deploy/examples/triton as written there;
 *   - Triton serves a python-backend model as uid 1000 with the arguments of deploy/examples/triton;
 *   - MariaDB and Redis, started by their entrypoints from the environment, carry a real Dragonfly manager, whose
 *     scheduler becomes active and whose seed peer (the client image) announces itself, each reading its
 *     configuration where Dragonfly's chart mounts it (/etc/dragonfly/<name>.yaml).
 */
import { execFile } from 'node:child_process';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { dump, load } from 'js-yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildah, BUILDAH, buildahAvailable } from '../support/buildah.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { freePort } from '../support/ports.ts';
import { startProcess, waitFor, type ManagedProcess } from '../support/process.ts';

const run = promisify(execFile);
const describeImages = buildahAvailable() ? describe : describe.skip;

const TAGS = {
  peerload: 'ghcr.io/peerload/peerload:0.1.0',
  busybox: 'busybox:1.37',
  triton: 'nvcr.io/nvidia/tritonserver:24.10-py3',
  manager: 'dragonflyoss/manager:v2.5.1',
  scheduler: 'dragonflyoss/scheduler:v2.5.1',
  client: 'dragonflyoss/client:v1.4.2',
} as const;

let work: string;
/** tag -> OCI archive, as the script printed them. */
const archives = new Map<string, string>();
const containers: string[] = [];
const processes: ManagedProcess[] = [];

/** A working container of `tag` (removed after the file) and its root, mounted. */
async function container(tag: string): Promise<{ id: string; root: string }> {
  const id = await buildah('from', '--pull-never', '--quiet', tag);
  containers.push(id);
  return { id, root: await buildah('mount', id) };
}

/** `buildah run` in the foreground: the command's output, or the error with it. */
async function runIn(id: string, args: string[], opts: string[] = []): Promise<string> {
  const { stdout, stderr } = await run('buildah', [...BUILDAH, 'run', ...opts, id, '--', ...args], {
    maxBuffer: 16 << 20,
  });
  return stdout + stderr;
}

/** `buildah run` in the background on the host's network, as a pod's container with its own root. */
function serve(name: string, id: string, args: string[], opts: string[] = []): ManagedProcess {
  const p = startProcess(
    name,
    'buildah',
    [...BUILDAH, 'run', '--network', 'host', ...opts, id, '--', ...args],
    join(work, `${name}.log`),
  );
  processes.push(p);
  return p;
}

const log = (name: string) => readFileSync(join(work, `${name}.log`), 'utf8');

/** The ELF files of `files` (directories: their shared objects) whose libraries the image's loader cannot all find. */
function missingLibraries(root: string, files: string[]): Promise<string[]> {
  const elf = (path: string) => {
    try {
      const fd = readFileSync(path).subarray(0, 4);
      return fd.toString('latin1') === '\x7fELF';
    } catch {
      return false;
    }
  };
  const targets = files.flatMap((f) => {
    const path = join(root, f);
    if (!statSync(path).isDirectory()) return [f];
    return (readdirSync(path, { recursive: true }) as string[])
      .map((rel) => join(f, rel))
      .filter((rel) => /\.so(\.|$)/.test(rel) && statSync(join(root, rel)).isFile());
  });
  return Promise.all(
    targets
      .filter((f) => elf(join(root, f)))
      .map(async (f) => {
        // The image's own loader, chrooted: the libraries it resolves are the image's (its ld.so.cache included).
        // A wheel's bundled libraries (auditwheel's `<package>.libs/`) carry no search path of their own: the
        // extension module that needs them loads them through its RUNPATH, so each finds its siblings loaded.
        const siblings = /\.libs$/.test(dirname(f)) ? ['--library-path', `/${dirname(f)}`] : [];
        const { stdout } = await run('chroot', [
          root,
          '/lib64/ld-linux-x86-64.so.2',
          ...siblings,
          '--list',
          `/${f}`,
        ]).catch((err: { stdout?: string; message: string }) => ({ stdout: err.stdout || err.message }));
        return /not found|No such file/.test(stdout) ? `${f}: ${stdout.trim()}` : '';
      }),
  ).then((r) => r.filter(Boolean));
}

beforeAll(async () => {
  if (!buildahAvailable()) return;
  work = mkdtempSync(join(tmpdir(), 'peerload-cluster-images-'));
  const t0 = Date.now();
  const { stdout } = await run('bash', ['scripts/build-cluster-images.sh'], {
    cwd: REPO_ROOT,
    maxBuffer: 16 << 20,
  });
  for (const line of stdout.trim().split('\n')) {
    const [tag, archive] = line.split('\t');
    archives.set(tag!, archive!);
  }
  console.log(`[cluster-images] ${archives.size} images in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}, 3_600_000);

afterAll(async () => {
  await Promise.allSettled(processes.map((p) => p.stop(15_000)));
  for (const id of containers) await buildah('rm', id).catch(() => {});
  if (work) rmSync(work, { recursive: true, force: true });
});

describeImages('cluster images (scripts/build-cluster-images.sh)', () => {
  it('writes one OCI archive per image, named as the runtime normalises the manifests’ tag', async () => {
    const expected = [...Object.values(TAGS)];
    for (const tag of expected) expect(archives.has(tag), tag).toBe(true);
    expect([...archives.keys()].filter((t) => t.startsWith('peerload.local/')).sort()).toEqual([
      expect.stringMatching(/^peerload\.local\/mariadb:\d+\.\d+\.\d+$/),
      expect.stringMatching(/^peerload\.local\/redis:\d+\.\d+\.\d+$/),
    ]);
    const sizes: string[] = [];
    for (const [tag, archive] of archives) {
      const { stdout } = await run('tar', ['-xOf', archive, 'index.json']);
      const index = JSON.parse(stdout) as { manifests: { annotations: Record<string, string> }[] };
      const name = index.manifests[0]!.annotations['org.opencontainers.image.ref.name']!;
      // busybox:1.37 is docker.io/library/busybox:1.37 to the kubelet; names with a registry stay as they are.
      const normalized = !tag.includes('/')
        ? `docker.io/library/${tag}`
        : tag.split('/')[0]!.includes('.')
          ? tag
          : `docker.io/${tag}`;
      expect(name).toBe(normalized);
      sizes.push(`${tag} ${(statSync(archive).size / 1e6).toFixed(0)} MB`);
    }
    console.log(`[cluster-images] archives: ${sizes.join(', ')}`);
  });

  it('peerload: the CLI starts as the image’s user', async () => {
    const { id } = await container(TAGS.peerload);
    expect(await runIn(id, ['/usr/local/bin/peerload', '--version'], ['--user', '65532:65532'])).toMatch(
      /^peerload \d+\.\d+\.\d+/,
    );
  });

  it('busybox: runs the init containers of deploy/examples/triton as written there', async () => {
    const deployment = load(
      readFileSync(join(REPO_ROOT, 'deploy/examples/triton/deployment.yaml'), 'utf8'),
    ) as {
      spec: { template: { spec: { initContainers: { image: string; command: string[] }[] } } };
    };
    const init = deployment.spec.template.spec.initContainers[0]!;
    expect(init.image).toBe(TAGS.busybox);
    const config = join(work, 'config');
    const models = join(work, 'models');
    mkdirSync(config);
    mkdirSync(models);
    chmodSync(models, 0o777); // an emptyDir
    writeFileSync(join(config, 'echo.config.pbtxt'), ECHO_CONFIG_PBTXT);
    const { id, root } = await container(TAGS.busybox);
    await runIn(id, init.command, [
      '--user',
      '1000:1000',
      '-v',
      `${config}:/config:ro`,
      '-v',
      `${models}:/models`,
    ]);
    expect(readFileSync(join(models, 'echo/config.pbtxt'), 'utf8')).toBe(ECHO_CONFIG_PBTXT);
    expect(statSync(join(models, 'echo')).uid).toBe(1000);
    // The hard-link variant's `chown 1000:1000 <dir>` as root, and the chart-style waits (nc, nslookup).
    const owned = join(work, 'owned');
    mkdirSync(owned);
    await runIn(id, ['chown', '1000:1000', '/model-root'], ['-v', `${owned}:/model-root`]);
    expect(statSync(owned).uid).toBe(1000);
    for (const applet of ['nc', 'nslookup', 'sleep'])
      expect(readlinkSync(join(root, 'bin', applet))).toBe('busybox');
  });

  it('Triton: no missing library; serves a python-backend model as uid 1000 with the example’s arguments', async () => {
    const { id, root } = await container(TAGS.triton);
    expect(
      await missingLibraries(root, [
        'opt/tritonserver/bin/tritonserver',
        'opt/tritonserver/backends',
        'opt/tritonserver/caches',
        'opt/tritonserver/lib',
        'opt/python/bin/python3',
        'opt/python/lib',
      ]),
    ).toEqual([]);

    const repo = join(work, 'triton-models');
    mkdirSync(join(repo, 'echo/1'), { recursive: true });
    writeFileSync(join(repo, 'echo/config.pbtxt'), ECHO_CONFIG_PBTXT);
    writeFileSync(join(repo, 'echo/1/model.py'), ECHO_MODEL_PY);
    writeFileSync(join(repo, 'echo/1/offset.json'), '{"offset": 10}');
    const deployment = load(
      readFileSync(join(REPO_ROOT, 'deploy/examples/triton/deployment.yaml'), 'utf8'),
    ) as {
      spec: { template: { spec: { containers: { name: string; command: string[]; args: string[] }[] } } };
    };
    const triton = deployment.spec.template.spec.containers.find((c) => c.name === 'triton')!;
    const port = await freePort();
    const args = [
      ...triton.command,
      ...triton.args.map((a) => (a.startsWith('--http-port=') ? `--http-port=${port}` : a)),
    ];
    serve('triton', id, args, ['--user', '1000:1000', '-v', `${repo}:/models:ro`]);
    const url = `http://127.0.0.1:${port}`;
    await waitFor('Triton to be ready', async () => (await fetch(`${url}/v2/health/ready`)).ok, {
      timeoutMs: 60_000,
      intervalMs: 300,
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${log('triton').slice(-2000)}`);
    });
    const loaded = await fetch(`${url}/v2/repository/models/echo/load`, { method: 'POST' });
    expect(loaded.status, await loaded.text()).toBe(200);
    const infer = await fetch(`${url}/v2/models/echo/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2], data: [1, 2] }] }),
    });
    expect(((await infer.json()) as { outputs: { data: number[] }[] }).outputs[0]!.data).toEqual([11, 12]);
    expect(log('triton')).toMatch(/server_version\s*\|\s*2\.51\.0/);
  });

  it('Dragonfly: MariaDB and Redis from their entrypoints carry the manager; the scheduler and a seed peer join', async () => {
    const entrypoints = {
      [TAGS.manager]: 'opt/dragonfly/bin/server',
      [TAGS.scheduler]: 'opt/dragonfly/bin/scheduler',
      [TAGS.client]: 'usr/local/bin/dfdaemon',
    };
    for (const [tag, binary] of Object.entries(entrypoints)) {
      const { root } = await container(tag);
      expect(statSync(join(root, binary)).mode & 0o111, binary).not.toBe(0);
      expect(await missingLibraries(root, [binary]), tag).toEqual([]);
    }
    const mariadbTag = [...archives.keys()].find((t) => t.startsWith('peerload.local/mariadb:'))!;
    const redisTag = [...archives.keys()].find((t) => t.startsWith('peerload.local/redis:'))!;
    // A password an entrypoint must quote, and a Redis password: as an admin's values would set them.
    const password = `p'a\\ss"${Date.now()}`;
    const [dbPort, redisPort, restPort, grpcPort, schedulerPort] = await Promise.all(
      Array.from({ length: 5 }, () => freePort()),
    );
    const db = await container(mariadbTag);
    serve(
      'mariadb',
      db.id,
      ['/usr/local/bin/docker-entrypoint.sh'],
      ['--env', `MARIADB_PASSWORD=${password}`, '--env', `MARIADB_PORT=${dbPort}`],
    );
    const redis = await container(redisTag);
    serve(
      'redis',
      redis.id,
      ['/usr/local/bin/docker-entrypoint.sh'],
      ['--env', `REDIS_PORT=${redisPort}`, '--env', 'REDIS_PASSWORD=dragonfly'],
    );
    // The final server's banner (the first start's own server listens on no port).
    await waitFor('MariaDB to listen', () => log('mariadb').includes(`port: ${dbPort}`), {
      timeoutMs: 60_000,
      intervalMs: 300,
    });

    const config = (name: string, value: unknown) => {
      const dir = join(work, `${name}-config`);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `${name}.yaml`), dump(value));
      // Where Dragonfly's chart mounts the ConfigMap, read by default (no --config).
      return ['-v', `${dir}:/etc/dragonfly:ro`];
    };
    const jobQueue = { brokerDB: 1, backendDB: 2 };
    const manager = await container(TAGS.manager);
    serve(
      'manager',
      manager.id,
      ['/opt/dragonfly/bin/server', '--console'],
      config('manager', {
        server: {
          grpc: { advertiseIP: '127.0.0.1', listenIP: '127.0.0.1', port: { start: grpcPort, end: grpcPort } },
          rest: { addr: `127.0.0.1:${restPort}` },
        },
        auth: { jwt: { realm: 'Dragonfly', key: 'a'.repeat(32), timeout: '24h', maxRefresh: '24h' } },
        database: {
          type: 'mysql',
          mysql: {
            user: 'dragonfly',
            password,
            host: '127.0.0.1',
            port: dbPort,
            dbname: 'manager',
            migrate: true,
          },
          redis: { addrs: [`127.0.0.1:${redisPort}`], password: 'dragonfly', db: 0, ...jobQueue },
        },
        metrics: { enable: false },
        network: { enableIPv6: false },
      }),
    );
    const managerURL = `http://127.0.0.1:${restPort}`;
    await waitFor('the manager to be healthy', async () => (await fetch(`${managerURL}/healthy`)).ok, {
      timeoutMs: 90_000,
      intervalMs: 500,
    }).catch((err: Error) => {
      throw new Error(`${err.message}\n${log('manager').slice(-2000)}\n${log('mariadb').slice(-1000)}`);
    });

    const scheduler = await container(TAGS.scheduler);
    serve(
      'scheduler',
      scheduler.id,
      ['/opt/dragonfly/bin/scheduler', '--console'],
      config('scheduler', {
        server: {
          advertiseIP: '127.0.0.1',
          advertisePort: schedulerPort,
          listenIP: '127.0.0.1',
          port: schedulerPort,
          host: 'images-scheduler',
        },
        database: { redis: { addrs: [`127.0.0.1:${redisPort}`], password: 'dragonfly', ...jobQueue } },
        dynConfig: { refreshInterval: '5s' },
        manager: { addr: `127.0.0.1:${grpcPort}`, schedulerClusterID: 1, keepAlive: { interval: '5s' } },
        job: { enable: true },
        metrics: { enable: false },
        network: { enableIPv6: false },
      }),
    );
    const signIn = await fetch(`${managerURL}/api/v1/users/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'root', password: 'dragonfly' }),
    });
    const { token } = (await signIn.json()) as { token: string };
    await waitFor(
      'the scheduler to be active in the manager',
      async () => {
        const res = await fetch(`${managerURL}/api/v1/schedulers`, {
          headers: { authorization: `Bearer ${token}` },
        });
        return ((await res.json()) as { host_name: string; state: string }[]).some(
          (s) => s.host_name === 'images-scheduler' && s.state === 'active',
        );
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );

    const [upload, proxy, health, metrics, stats, tcp, quic] = await Promise.all(
      Array.from({ length: 7 }, () => freePort()),
    );
    const seed = await container(TAGS.client);
    serve(
      'seed-peer',
      seed.id,
      ['/usr/local/bin/dfdaemon', '--console'],
      config('dfdaemon', {
        host: { ip: '127.0.0.1', hostname: 'images-seed-peer' },
        manager: { addr: `http://127.0.0.1:${grpcPort}` },
        seedPeer: { enable: true, type: 'super' },
        upload: { server: { ip: '127.0.0.1', port: upload } },
        storage: { server: { ip: '127.0.0.1', tcpPort: tcp, quicPort: quic }, dir: '/var/lib/dragonfly' },
        proxy: { server: { ip: '127.0.0.1', port: proxy } },
        health: { server: { ip: '127.0.0.1', port: health } },
        metrics: { server: { ip: '127.0.0.1', port: metrics } },
        stats: { server: { ip: '127.0.0.1', port: stats } },
        dynconfig: { refreshInterval: '5s' },
        scheduler: { announceInterval: '10s' },
        network: { enableIPv6: false },
      }),
    );
    await waitFor(
      'the seed peer to announce itself to the scheduler and be healthy',
      async () =>
        log('seed-peer').includes(`announce host to 127.0.0.1:${schedulerPort}`) &&
        (await fetch(`http://127.0.0.1:${health}/healthy`)).ok,
      { timeoutMs: 60_000, intervalMs: 500 },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\n${log('seed-peer').slice(-2000)}`);
    });
  });
});
