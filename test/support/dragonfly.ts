/**
 * The real Dragonfly P2P network, built from source by scripts/setup-dragonfly.sh and started here as processes
 * on loopback: MariaDB and Redis (Debian), the manager (REST + gRPC) and one scheduler in scheduler cluster 1
 * (Go, v2.5.1), one seed peer and N node peers (`dfdaemon`, Rust, dragonfly-client 1.4.2). Every peer has its
 * own 127.0.0.x address, its own ports and its own storage, so the scheduler sees N+1 distinct hosts and pieces
 * really move between peers. Everything is stopped by PID and its directory removed by `stop()`.
 *
 * The configurations are the stock ones of the Dragonfly release (deploy/docker-compose templates) with only
 * addresses, ports, directories and a few intervals changed for a test: the peers' `proxy.rules` stay the
 * stock `blobs/sha256.*`, so a download that does not ask for P2P (`X-Dragonfly-Use-P2P: true`) bypasses it,
 * exactly as in a cluster installed from the Dragonfly chart.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { dump } from 'js-yaml';
import { redact } from '../../src/redact.ts';
import { startOrigin } from './origin.ts';
import { freePort } from './ports.ts';
import { setUpTool, startProcess, waitFor, type ManagedProcess } from './process.ts';

const run = promisify(execFile);

/** The Dragonfly release the harness runs; scripts/setup-dragonfly.sh builds the same. */
export const DRAGONFLY_VERSION = 'v2.5.1';
export const DRAGONFLY_CLIENT_VERSION = '1.4.2';
/** The root user the manager creates on first start (manager/permission/rbac). */
export const ROOT_USER = { name: 'root', password: 'dragonfly' } as const;
/** The manager's and scheduler's Redis databases of their job queue: its messages, and its tasks' results. */
const JOB_QUEUE_DBS = { brokerDB: 1, backendDB: 2 } as const;
/** The stock daemon proxy rule of the Dragonfly chart and docker-compose templates. */
export const STOCK_PROXY_RULES = ['blobs/sha256.*'] as const;

/** What a test reads of a peer: its addresses, directories and logs (the network's owner also holds its process). */
export interface DragonflyPeerView {
  name: string;
  /** The peer's own loopback address (127.0.0.x), its host IP as the scheduler sees it. */
  ip: string;
  hostname: string;
  /** `http://<ip>:<port>`: the daemon's HTTP proxy (port 4001 in a cluster). */
  proxyURL: string;
  storageDir: string;
  logDir: string;
  /** Text of the daemon's logs so far (all files of its log directory). */
  logs(): Promise<string>;
}

export interface DragonflyPeer extends DragonflyPeerView {
  process: ManagedProcess;
}

export interface DragonflyOptions {
  /** Node peers besides the seed peer (default 2). */
  nodePeers?: number;
  /** The peers' proxy rules (regexes); default the stock `blobs/sha256.*`. */
  proxyRules?: readonly string[];
  /** Daemon log level (default info). */
  logLevel?: 'info' | 'debug';
  /** Only the manager and its stores: no scheduler, no peers (jobs then fail: no seed peer). */
  managerOnly?: boolean;
  /**
   * Return once every peer serves, before a preheat can succeed (`preheatable` settles then): the scheduler takes
   * in its seed peer up to 30 s later, time a test can spend starting its other servers.
   */
  deferPreheatable?: boolean;
  /**
   * The scheduler's parent look-ups (500 ms apart) before it sends a peer back to the origin, and before it gives
   * up; stock 4 and 5. An admin raises them so node peers that ask for a task before the seed peer has registered
   * it wait for the seed peer instead of reading the origin themselves.
   */
  schedulerRetries?: { backToSourceLimit: number; limit: number };
}

/**
 * The window docs/operations.md tells an admin to give the scheduler (about 10 s of parent look-ups). The run's
 * shared network uses it: its files show that node peers join the seed peer's task (no node peer reads the origin),
 * and with the stock 1.6 s that depends on how fast the seed peer's first request to the origin is answered on a
 * loaded 2-core machine, not on anything peerload does.
 */
export const ADMIN_SCHEDULER_RETRIES = { backToSourceLimit: 20, limit: 25 } as const;

/**
 * What a test uses of a running network: addresses, directories, the manager's API, the processes' report. A
 * network a test started itself (`Dragonfly`) and the run's shared one (shared-dragonfly.ts) both offer it.
 */
export interface DragonflyView {
  /** The manager's REST base address, e.g. http://127.0.0.1:40123. */
  managerURL: string;
  /** Undefined with `managerOnly`. */
  seedPeer: DragonflyPeerView | undefined;
  peers: DragonflyPeerView[];
  /** Signs in through the manager's REST API and returns the JWT. */
  signIn(user?: { name: string; password: string }): Promise<string>;
  /** Creates a personal access token (for /oapi/v1) through the manager's REST API and returns it. */
  createPersonalAccessToken(name: string, scopes?: string[]): Promise<string>;
  dir: string;
  /** A line per process (manager, scheduler, stores, peers): running, or how it ended and its output's end. */
  report(): Promise<string>;
  /** Settles once a preheat job can succeed; already settled unless `deferPreheatable` (or with `managerOnly`). */
  preheatable: Promise<void>;
}

export interface Dragonfly extends DragonflyView {
  seedPeer: DragonflyPeer | undefined;
  peers: DragonflyPeer[];
  /** The manager, scheduler and database processes. */
  processes: ManagedProcess[];
  stop(): Promise<void>;
}

/** The bin directory with manager, scheduler and dfdaemon: $PEERLOAD_DRAGONFLY_BIN, else the set-up's. */
export const dragonflyBinDir = () => setUpTool('setup-dragonfly.sh', 'PEERLOAD_DRAGONFLY_BIN');

/** Picks `n` distinct 127.0.0.x addresses, from a random start so parallel runs rarely collide. */
function loopbackAddresses(n: number): string[] {
  const start = 2 + (randomBytes(1)[0]! % 200);
  return Array.from({ length: n }, (_, i) => `127.0.0.${start + i}`);
}

export async function startDragonfly(opts: DragonflyOptions = {}): Promise<Dragonfly> {
  const bin = await dragonflyBinDir();
  const dir = await mkdtemp(join(tmpdir(), 'peerload-dragonfly-'));
  const processes: ManagedProcess[] = [];
  const peers: LaunchedPeer[] = [];
  const probing = new AbortController();
  const stop = async () => {
    probing.abort();
    // Peers first (they talk to the scheduler and manager), then the services, then the stores.
    await Promise.allSettled(peers.map((p) => p.process.stop(10_000)));
    for (const p of [...processes].reverse()) await p.stop(10_000).catch(() => {});
    // PEERLOAD_KEEP_DRAGONFLY=1 keeps the configurations and logs for a look afterwards.
    if (!process.env['PEERLOAD_KEEP_DRAGONFLY']) await rm(dir, { recursive: true, force: true });
  };
  try {
    // Each starter owns its process to `processes` as soon as it spawns it, before it waits for it: a start that
    // fails further on (the other store, the manager's health) still stops everything already running.
    const own = (p: ManagedProcess) => void processes.push(p);
    const stores = [startMariaDB(join(dir, 'mariadb'), own), startRedis(join(dir, 'redis'), own)] as const;
    // Both settle before a failure of one is thrown, so the other's process is owned by then and stopped too.
    await Promise.allSettled(stores);
    const [db, store] = await Promise.all(stores);

    const manager = await startManagerProcess(bin, join(dir, 'manager'), db, store.port, own);

    const token = await signIn(manager.url, ROOT_USER);
    const network = {
      managerURL: manager.url,
      processes,
      dir,
      // The root user's JWT of start-up is reused: the real manager refuses sign-ins that follow one another closely.
      signIn: async (user: { name: string; password: string } = ROOT_USER) =>
        user === ROOT_USER ? token : signIn(manager.url, user),
      createPersonalAccessToken: (name: string, scopes?: string[]) =>
        createPersonalAccessToken(manager.url, token, name, scopes),
      report: () => processReport([...processes, ...peers.map((p) => p.process)]),
      preheatable: Promise.resolve(),
      stop,
    };
    if (opts.managerOnly) return { ...network, seedPeer: undefined, peers };

    own(
      await startScheduler(bin, join(dir, 'scheduler'), manager.grpcAddr, store.port, opts.schedulerRetries),
    );
    await waitFor(
      'the scheduler to be active in the manager',
      async () => {
        const list = await getJSON<{ state: string }[]>(`${manager.url}/api/v1/schedulers`, token);
        return list.some((s) => s.state === 'active');
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );

    const ips = loopbackAddresses(1 + (opts.nodePeers ?? 2));
    const rules = opts.proxyRules ?? STOCK_PROXY_RULES;
    const seed = await startPeer(bin, dir, 'seed-peer', ips[0]!, manager.grpcAddr, {
      seed: true,
      rules,
      opts,
    });
    peers.push(seed);
    // Client 1.4 seed peers never register with the manager (it does not call UpdateSeedPeer): the scheduler
    // learns them from their host announcement, which is what a preheat job needs.
    for (const [i, ip] of ips.slice(1).entries()) {
      peers.push(
        await startPeer(bin, dir, `peer-${i + 1}`, ip, manager.grpcAddr, { seed: false, rules, opts }),
      );
    }
    await Promise.all(peers.map((p, i) => untilServing(p, (q) => (peers[i] = q))));

    if (!opts.deferPreheatable) {
      await preheatProbe(manager.url, token, store.port, probing.signal);
      return { ...network, seedPeer: seed, peers: peers.slice(1) };
    }
    const preheatable = preheatProbe(manager.url, token, store.port, probing.signal).catch(async (err) => {
      throw new Error(`${(err as Error).message}\n${await tailLogs(dir)}`, { cause: err });
    });
    // Reported where the test awaits it, not as an unhandled rejection before that.
    preheatable.catch(() => {});
    return { ...network, seedPeer: seed, peers: peers.slice(1), preheatable };
  } catch (err) {
    const detail = await tailLogs(dir);
    await stop();
    throw new Error(`${(err as Error).message}\n${detail}`, { cause: err });
  }
}

async function tailLogs(dir: string): Promise<string> {
  const { stdout } = await run('bash', [
    '-c',
    `tail -n 15 $(find "${dir}" -type f \\( -name '*.log' -o -name '*.out' -o -name 'dfdaemon*' \\) -not -path '*/mariadb/data/*') 2>/dev/null`,
  ]).catch(() => ({ stdout: '' }));
  return redact(stdout);
}

export async function createPersonalAccessToken(
  managerURL: string,
  jwt: string,
  name: string,
  scopes = ['job'],
): Promise<string> {
  const res = await fetch(`${managerURL}/api/v1/personal-access-tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
    // The root user is the manager's first user (id 1).
    body: JSON.stringify({
      name,
      scopes,
      user_id: 1,
      expired_at: new Date(Date.now() + 24 * 3600_000).toISOString(),
    }),
  });
  if (!res.ok) throw new Error(`creating a personal access token: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { token: string }).token;
}

/**
 * Waits until the network can preheat: a job right after start-up ends FAILURE "no available seed peer" until the
 * scheduler's seed-peer ring has taken in the seed peer's announcement (it is rebuilt every 30 s), so a tiny file is
 * preheated (again) until a job succeeds.
 *
 * The job's state is read where the scheduler writes it, the job queue's result backend in Redis, not from the
 * manager: the manager copies a preheat's state into its database first 30 s after the job's creation (then at
 * back-off), so each attempt read through it would cost 30 s.
 */
async function preheatProbe(
  managerURL: string,
  jwt: string,
  redisPort: number,
  stopped: AbortSignal,
): Promise<void> {
  const origin = await startOrigin({ '/probe.bin': Buffer.alloc(4096, 1) });
  try {
    await waitFor(
      'a probe preheat to succeed',
      async () => {
        if (stopped.aborted) return true;
        const create = await fetch(`${managerURL}/api/v1/jobs`, {
          method: 'POST',
          headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
          body: JSON.stringify({ type: 'preheat', args: { type: 'file', url: `${origin.url}/probe.bin` } }),
        });
        if (!create.ok) throw new Error(`probe job: ${create.status} ${await create.text()}`);
        const { task_id: group } = (await create.json()) as { task_id: string };
        for (let i = 0; i < 40; i++) {
          await new Promise((r) => setTimeout(r, 250));
          const state = await queuedGroupState(redisPort, group);
          if (state === 'SUCCESS') return true;
          if (state === 'FAILURE') return false;
        }
        return false;
      },
      { timeoutMs: 300_000, intervalMs: 2_000 },
    );
    if (stopped.aborted) throw new Error('the network was stopped before a preheat could succeed');
  } finally {
    await origin.close();
  }
}

/**
 * A job group's state in the job queue's result backend (the queue library keeps the group's task ids under the
 * group's id and each task's state under the task's id, as JSON): SUCCESS when every task succeeded, FAILURE when
 * one failed, undefined while any is still queued or running.
 */
async function queuedGroupState(
  redisPort: number,
  group: string,
): Promise<'SUCCESS' | 'FAILURE' | undefined> {
  const backend = [
    '-h',
    '127.0.0.1',
    '-p',
    String(redisPort),
    '-n',
    String(JOB_QUEUE_DBS.backendDB),
    '--raw',
  ];
  const get = async <T>(key: string): Promise<T | undefined> => {
    const { stdout } = await run('redis-cli', [...backend, 'GET', key]);
    return stdout.trim() ? (JSON.parse(stdout) as T) : undefined;
  };
  const meta = await get<{ TaskUUIDs?: string[] }>(group);
  if (!meta?.TaskUUIDs?.length) return undefined;
  const states = await Promise.all(meta.TaskUUIDs.map((id) => get<{ State?: string }>(id)));
  if (states.some((s) => s?.State === 'FAILURE')) return 'FAILURE';
  return states.every((s) => s?.State === 'SUCCESS') ? 'SUCCESS' : undefined;
}

/** Signs in; the real manager refuses a sign-in within about a second of the previous one (401), so it retries. */
export async function signIn(managerURL: string, user: { name: string; password: string }): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(`${managerURL}/api/v1/users/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(user),
    });
    if (res.ok) return ((await res.json()) as { token: string }).token;
    const text = await res.text();
    if (res.status !== 401 || attempt >= 3) throw new Error(`sign-in: ${res.status} ${text}`);
    await new Promise((r) => setTimeout(r, 1_200));
  }
}

async function getJSON<T>(url: string, token: string): Promise<T> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  if (!res.ok) throw new Error(`GET ${url}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

interface MariaDB {
  port: number;
  user: string;
  password: string;
  database: string;
}

/** MariaDB on a free loopback port with its own data directory; a database and user for the manager. */
async function startMariaDB(dir: string, own: (p: ManagedProcess) => void): Promise<MariaDB> {
  // Its own tmpdir: two instances bootstrapping at once in the system's collided on their `#sql-temptable-*` files.
  const tmp = join(dir, 'tmp');
  await mkdir(tmp, { recursive: true });
  const data = join(dir, 'data');
  const socket = join(dir, 'mysqld.sock');
  const port = await freePort();
  await run('mariadb-install-db', [
    '--no-defaults',
    `--datadir=${data}`,
    `--tmpdir=${tmp}`,
    '--user=root',
    '--auth-root-authentication-method=socket',
    '--skip-test-db',
  ]);
  const proc = startProcess(
    'mariadb',
    'mariadbd',
    [
      '--no-defaults',
      `--datadir=${data}`,
      `--tmpdir=${tmp}`,
      `--socket=${socket}`,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      '--user=root',
      '--skip-name-resolve',
      `--pid-file=${join(dir, 'mariadb.pid')}`,
      '--innodb-buffer-pool-size=64M',
      // The manager's schema stores long text in utf8mb4 columns with indexes.
      '--character-set-server=utf8mb4',
    ],
    join(dir, 'mariadb.log'),
  );
  own(proc);
  const db = { port, user: 'dragonfly', password: randomBytes(12).toString('hex'), database: 'manager' };
  await waitFor(
    'MariaDB to accept connections',
    async () => {
      await run('mariadb', ['--no-defaults', `--socket=${socket}`, '-u', 'root', '-e', 'SELECT 1']);
      return true;
    },
    { timeoutMs: 60_000, intervalMs: 300 },
  );
  await run('mariadb', [
    '--no-defaults',
    `--socket=${socket}`,
    '-u',
    'root',
    '-e',
    `CREATE DATABASE ${db.database} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;` +
      `CREATE USER '${db.user}'@'127.0.0.1' IDENTIFIED BY '${db.password}';` +
      `GRANT ALL PRIVILEGES ON ${db.database}.* TO '${db.user}'@'127.0.0.1';`,
  ]);
  return db;
}

/** Redis on a free loopback port, nothing persisted. */
async function startRedis(dir: string, own: (p: ManagedProcess) => void): Promise<{ port: number }> {
  await mkdir(dir, { recursive: true });
  const port = await freePort();
  const proc = startProcess(
    'redis',
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    join(dir, 'redis.log'),
  );
  own(proc);
  await waitFor(
    'Redis to accept connections',
    async () => {
      const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'PING']);
      return stdout.trim() === 'PONG';
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  );
  return { port };
}

async function startManagerProcess(
  bin: string,
  dir: string,
  db: MariaDB,
  redisPort: number,
  own: (p: ManagedProcess) => void,
): Promise<{ url: string; grpcAddr: string }> {
  await mkdir(join(dir, 'log'), { recursive: true });
  const [restPort, grpcPort] = [await freePort(), await freePort()];
  const config = {
    server: {
      name: 'peerload-test-manager',
      logDir: join(dir, 'log'),
      pluginDir: join(dir, 'plugins'),
      grpc: { advertiseIP: '127.0.0.1', listenIP: '127.0.0.1', port: { start: grpcPort, end: grpcPort } },
      rest: { addr: `127.0.0.1:${restPort}` },
    },
    auth: {
      jwt: { realm: 'Dragonfly', key: randomBytes(24).toString('hex'), timeout: '24h', maxRefresh: '24h' },
    },
    database: {
      type: 'mysql',
      mysql: {
        user: db.user,
        password: db.password,
        host: '127.0.0.1',
        port: db.port,
        dbname: db.database,
        migrate: true,
      },
      redis: {
        addrs: [`127.0.0.1:${redisPort}`],
        db: 0,
        ...JOB_QUEUE_DBS,
        proxy: { enable: false },
      },
    },
    metrics: { enable: false },
    network: { enableIPv6: false },
  };
  const configPath = join(dir, 'manager.yaml');
  await writeFile(configPath, dump(config));
  const proc = startProcess(
    'manager',
    join(bin, 'manager'),
    ['--config', configPath, '--console'],
    join(dir, 'manager.log'),
  );
  own(proc);
  const url = `http://127.0.0.1:${restPort}`;
  await waitFor('the manager REST API', async () => (await fetch(`${url}/healthy`)).ok, {
    timeoutMs: 90_000,
    intervalMs: 300,
  });
  return { url, grpcAddr: `127.0.0.1:${grpcPort}` };
}

async function startScheduler(
  bin: string,
  dir: string,
  managerAddr: string,
  redisPort: number,
  retries: DragonflyOptions['schedulerRetries'],
): Promise<ManagedProcess> {
  await mkdir(join(dir, 'log'), { recursive: true });
  const port = await freePort();
  const config = {
    server: {
      advertiseIP: '127.0.0.1',
      advertisePort: port,
      listenIP: '127.0.0.1',
      port,
      host: 'peerload-test-scheduler',
      logDir: join(dir, 'log'),
      pluginDir: join(dir, 'plugins'),
      dataDir: join(dir, 'data'),
    },
    database: { redis: { addrs: [`127.0.0.1:${redisPort}`], ...JOB_QUEUE_DBS } },
    // Seed peers and schedulers are learnt from the manager; a test cannot wait the default minute.
    dynConfig: { refreshInterval: '5s' },
    ...(retries && {
      scheduler: { retryBackToSourceLimit: retries.backToSourceLimit, retryLimit: retries.limit },
    }),
    manager: { addr: managerAddr, schedulerClusterID: 1, keepAlive: { interval: '5s' } },
    job: { enable: true, globalWorkerNum: 2, schedulerWorkerNum: 2, localWorkerNum: 4 },
    metrics: { enable: false },
    network: { enableIPv6: false },
  };
  const configPath = join(dir, 'scheduler.yaml');
  await writeFile(configPath, dump(config));
  return startProcess(
    'scheduler',
    join(bin, 'scheduler'),
    ['--config', configPath, '--console'],
    join(dir, 'scheduler.log'),
  );
}

async function startPeer(
  bin: string,
  root: string,
  name: string,
  ip: string,
  managerAddr: string,
  o: { seed: boolean; rules: readonly string[]; opts: DragonflyOptions },
  attempt = 1,
): Promise<LaunchedPeer> {
  const dir = join(root, name);
  const logDir = join(dir, 'log');
  const storageDir = join(dir, 'storage');
  await mkdir(logDir, { recursive: true });
  const port = () => freePort(ip);
  const hostname = `peerload-${name}`;
  const proxyPort = await port();
  const healthPort = await port();
  const storageTCPPort = await port();
  const config = {
    host: { ip, hostname, idc: '', location: '' },
    server: { pluginDir: join(dir, 'plugins'), cacheDir: join(dir, 'cache') },
    // The stock piece timeout (360 s) and schedule timeout (3 h): the schedule timeout bounds the whole exchange
    // with the scheduler, downloads from parents included, so a shorter one sends a slow download back to the
    // origin for every piece (client 1.4.2 resource/task.rs: TokioStreamElapsed → download from source).
    download: { server: { socketPath: join(dir, 'dfdaemon.sock') } },
    upload: { server: { ip, port: await port() } },
    manager: { addr: `http://${managerAddr}` },
    scheduler: {
      announceInterval: '10s',
      maxScheduleCount: 5,
      enableBackToSource: true,
    },
    ...(o.seed ? { seedPeer: { enable: true, type: 'super' } } : {}),
    dynconfig: { refreshInterval: '5s' },
    storage: { server: { ip, tcpPort: storageTCPPort, quicPort: await port() }, dir: storageDir, keep: true },
    proxy: {
      server: { ip, port: proxyPort },
      rules: o.rules.map((regex) => ({ regex })),
      disableBackToSource: false,
      prefetch: false,
    },
    health: { server: { ip, port: healthPort } },
    metrics: { server: { ip, port: await port() } },
    stats: { server: { ip, port: await port() } },
    network: { enableIPv6: false },
  };
  const configPath = join(dir, 'dfdaemon.yaml');
  await writeFile(configPath, dump(config));
  const proc = startProcess(
    name,
    join(bin, 'dfdaemon'),
    ['--config', configPath, '--log-dir', logDir, '--log-level', o.opts.logLevel ?? 'info'],
    join(dir, 'dfdaemon.out'),
  );
  const logs = () => peerLogs(logDir);
  return {
    name,
    ip,
    hostname,
    proxyURL: `http://${ip}:${proxyPort}`,
    storageDir,
    logDir,
    process: proc,
    logs,
    attempt,
    healthURL: `http://${ip}:${healthPort}/healthy`,
    listening: [proxyPort, storageTCPPort],
    relaunch: async () => {
      // The failed start's logs stay beside the new one's: a start that fails for good prints them.
      await rename(dir, `${dir}.failed-${attempt}`);
      return startPeer(bin, root, name, ip, managerAddr, o, attempt + 1);
    },
  };
}

/** Text of a daemon's logs so far: the files of its log directory, then its output (beside the log directory). */
export async function peerLogs(logDir: string): Promise<string> {
  const out = join(dirname(logDir), 'dfdaemon.out');
  const { stdout } = await run('bash', ['-c', `cat "${logDir}"/* "${out}" 2>/dev/null`], {
    maxBuffer: 256 << 20,
  }).catch(() => ({ stdout: '' }));
  return stdout;
}

interface LaunchedPeer extends DragonflyPeer {
  /** 1 for the first start of this daemon, 2 for the next. */
  attempt: number;
  /** The daemon's health endpoint (200 once its health server is bound). */
  healthURL: string;
  /** TCP ports on `ip` the daemon listens on once started (proxy, storage). */
  listening: number[];
  /** Starts the same daemon again on fresh ports. */
  relaunch(): Promise<LaunchedPeer>;
}

const MAX_PEER_STARTS = 3;

/**
 * Waits until a daemon serves: it has announced its host to a scheduler (found through the manager), and its
 * health server, proxy and storage server accept connections. Its ports were free when chosen but not held, so
 * another process can take one before the daemon binds it; the daemon then exits (one server failing stops them
 * all), possibly after it announced itself, and a test would see a node whose peer never answers. Such a daemon
 * is started again on fresh ports.
 */
async function untilServing(first: LaunchedPeer, replace: (p: LaunchedPeer) => void): Promise<void> {
  for (let peer = first; ;) {
    let exitCode: number | null | undefined;
    const exited = peer.process.exited.then((code) => {
      exitCode = code;
    });
    const serving = waitFor(
      `${peer.name} to announce itself to the scheduler and serve`,
      async () => {
        if (exitCode !== undefined) return true;
        if (!/announce host to /.test(await peer.logs())) return false;
        if (!(await fetch(peer.healthURL)).ok) return false;
        for (const port of peer.listening) await connectable(peer.ip, port);
        return true;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    await Promise.race([serving, exited]);
    // A server that lost its port fails a moment after the others bound theirs.
    if (exitCode === undefined) await Promise.race([exited, new Promise((r) => setTimeout(r, 1_000))]);
    if (exitCode === undefined) return;
    const tail = await outputEnd(peer.process, 2_000);
    if (peer.attempt >= MAX_PEER_STARTS)
      throw new Error(
        `${peer.name} exited (code ${exitCode}) ${peer.attempt} times while starting:\n${tail}`,
      );
    console.warn(
      `${peer.name} exited (code ${exitCode}) while starting; starting it again on fresh ports:\n${tail}`,
    );
    peer = await peer.relaunch();
    replace(peer);
  }
}

async function processReport(processes: ManagedProcess[]): Promise<string> {
  const lines = await Promise.all(
    processes.map(async (p) => {
      const { name, child } = p;
      if (child.exitCode === null && child.signalCode === null) return `${name}: running (pid ${child.pid})`;
      return `${name}: exited (${child.exitCode ?? child.signalCode})\n${await outputEnd(p, 1_500)}`;
    }),
  );
  return lines.join('\n');
}

/** The last `chars` characters of a process's output, with URLs' credentials and signatures redacted. */
async function outputEnd(p: ManagedProcess, chars: number): Promise<string> {
  return redact((await readFile(p.logPath, 'utf8').catch(() => '')).slice(-chars));
}

/** Resolves once a TCP connection to ip:port succeeds; rejects when it is refused. */
function connectable(ip: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: ip, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
    socket.once('error', reject);
  });
}
