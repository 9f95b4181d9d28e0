/**
 * One real Dragonfly network for a whole e2e run, shared by every file that does not need a network of its own.
 * The e2e project's global set-up (dragonfly-setup.ts) serves it over a small HTTP service on loopback, whose
 * address files `inject('dragonflyService')`: the network starts when the first file asks for it (a run of files
 * that never ask pays nothing), at most once, and stops when the run ends. Vitest's provided values are fixed
 * before any file runs, so a network started on demand cannot be one of them.
 *
 * A file keeps to what is its own on the shared network: its namespace (and the Nodes named after it), its own
 * origin (its own port, so its own URLs and task ids), its own replicas, and counts scoped to those (its origin's
 * reads, the lines of a daemon's log naming its task ids, jobs by their id). A file that breaks the network (kills
 * a daemon, restarts the scheduler) starts its own with startDragonfly.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Agent, request } from 'undici';
import {
  ADMIN_SCHEDULER_RETRIES,
  ROOT_USER,
  createPersonalAccessToken,
  peerLogs,
  signIn,
  startDragonfly,
  type Dragonfly,
  type DragonflyPeerView,
  type DragonflyView,
} from './dragonfly.ts';

/** Node peers of the shared network: as many as the file that needs the most (node-preheat.test.ts) targets. */
export const SHARED_NODE_PEERS = 3;

/**
 * A bucket name of this file's own on the shared network: `prefix` and a random suffix. The daemons keep every
 * earlier file's tasks, and an origin's port may come round again; with the same bucket and key a later file's URL
 * would name an earlier file's task and be served its bytes. A name of its own keeps the task ids apart.
 */
export const fileBucket = (prefix: string): string => `${prefix}-${randomBytes(3).toString('hex')}`;

type PeerDescription = Omit<DragonflyPeerView, 'logs'>;

/** What a file needs to reach the shared network, as the service sends it. */
interface DragonflyDescription {
  managerURL: string;
  dir: string;
  /** The root user's JWT: the real manager refuses sign-ins that follow one another closely. */
  token: string;
  seedPeer: PeerDescription;
  peers: PeerDescription[];
}

/**
 * The run's shared network with its first `nodePeers` node peers (the seed peer is shared too). Another file may
 * have used it before: its peers hold other files' tasks and their logs other files' lines.
 */
export async function sharedDragonfly(
  service: string | undefined,
  nodePeers: number,
): Promise<DragonflyView> {
  if (!service)
    throw new Error('the shared Dragonfly network is served by the e2e project (vitest --project e2e)');
  if (nodePeers > SHARED_NODE_PEERS)
    throw new Error(
      `the shared network has ${SHARED_NODE_PEERS} node peers, not ${nodePeers}: start your own`,
    );
  const d = JSON.parse(await ask(service, 'POST', '/network')) as DragonflyDescription;
  const preheatable = ask(service, 'GET', '/preheatable').then(() => undefined);
  // Reported where the file awaits it, not as an unhandled rejection before that.
  preheatable.catch(() => {});
  const view = (p: PeerDescription): DragonflyPeerView => ({ ...p, logs: () => peerLogs(p.logDir) });
  return {
    managerURL: d.managerURL,
    dir: d.dir,
    seedPeer: view(d.seedPeer),
    peers: d.peers.slice(0, nodePeers).map(view),
    signIn: async (user = ROOT_USER) => (user === ROOT_USER ? d.token : signIn(d.managerURL, user)),
    createPersonalAccessToken: (name, scopes) =>
      createPersonalAccessToken(d.managerURL, d.token, name, scopes),
    report: () => ask(service, 'GET', '/report'),
    preheatable,
  };
}

/** A request to the service; the network's start and its first preheat take minutes, so no timeout but the hook's. */
async function ask(service: string, method: 'GET' | 'POST', path: string): Promise<string> {
  const dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
  try {
    const res = await request(`${service}${path}`, { method, dispatcher });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`the shared Dragonfly network: ${text}`);
    return text;
  } finally {
    await dispatcher.close();
  }
}

/** The service of dragonfly-setup.ts: starts the network on the first POST /network, once. */
export async function serveSharedDragonfly(): Promise<{ url: string; close(): Promise<void> }> {
  let network: Promise<Dragonfly> | undefined;
  let turn: Promise<unknown> = Promise.resolve();
  /** Networks whose first preheat never succeeded. */
  const unready = new WeakSet<Dragonfly>();
  const acquire = async (): Promise<Dragonfly> => {
    const running = await network?.catch(() => undefined);
    const dead = running ? exited(running) : [];
    if (running && unready.has(running)) dead.push('the first preheat (it never succeeded)');
    if (running && dead.length === 0) return running;
    if (running) {
      // What broke in an earlier file would fail every later one: start a fresh network, as each file once did.
      console.warn(
        `[shared dragonfly] ${dead.join(', ')} ended; starting a new network\n${await running.report()}`,
      );
      await running.stop();
    }
    // A start that failed is tried again by the next file, as when each file started its own.
    network = startDragonfly({
      nodePeers: SHARED_NODE_PEERS,
      deferPreheatable: true,
      schedulerRetries: ADMIN_SCHEDULER_RETRIES,
    });
    const started = await network;
    started.preheatable.catch(() => unready.add(started));
    console.log(`[shared dragonfly] manager ${started.managerURL}, ${started.peers.length} node peers`);
    return started;
  };
  const routes: Record<string, () => Promise<string>> = {
    'POST /network': async () => {
      // One file at a time in the e2e project; still, two asking at once must not start two networks.
      const next = turn.then(acquire);
      turn = next.catch(() => {});
      return JSON.stringify(await describe(await next));
    },
    'GET /preheatable': async () => {
      const running = await network!;
      await running.preheatable;
      return 'ok';
    },
    'GET /report': async () => (await network!).report(),
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const route = routes[`${req.method} ${req.url}`];
    if (!route) return void res.writeHead(404).end(`no ${req.method} ${req.url}`);
    if (!network && req.url !== '/network') return void res.writeHead(409).end('ask POST /network first');
    route().then(
      (text) => res.writeHead(200).end(text),
      (err: Error) => res.writeHead(500).end(err.message),
    );
  });
  const url = await listen(server);
  return {
    url,
    async close() {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await (await network?.catch(() => undefined))?.stop();
    },
  };
}

async function describe(d: Dragonfly): Promise<DragonflyDescription> {
  const peer = ({ name, ip, hostname, proxyURL, storageDir, logDir }: DragonflyPeerView) => ({
    name,
    ip,
    hostname,
    proxyURL,
    storageDir,
    logDir,
  });
  return {
    managerURL: d.managerURL,
    dir: d.dir,
    token: await d.signIn(),
    seedPeer: peer(d.seedPeer!),
    peers: d.peers.map(peer),
  };
}

/** The network's processes that have ended. */
function exited(d: Dragonfly): string[] {
  const all = [...d.processes, d.seedPeer!.process, ...d.peers.map((p) => p.process)];
  return all.filter((p) => p.child.exitCode !== null || p.child.signalCode !== null).map((p) => p.name);
}

function listen(server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address();
      if (addr && typeof addr === 'object') resolve(`http://127.0.0.1:${addr.port}`);
      else reject(new Error('no address'));
    });
  });
}
