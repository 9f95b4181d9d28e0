/**
 * An OIP repository server (real Triton or MLServer) with a real `peerload agent` beside it, as one pod of a
 * model-server Deployment: both listen on the address of "their node"'s peer daemon (a pod's traffic reaches its
 * node's daemon), the agent places versions into the server's model repository through that peer and signs the
 * object URLs with its own storage credentials.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { Dispatcher } from 'undici';
import { startOipEmulator, type OipEmulator, type OipFlavour } from './oip-emulator.ts';
import { tokenFile } from '../../src/agent/auth.ts';
import { credentialsDir } from '../../src/agent/credentials.ts';
import { DEFAULT_LIMITS } from '../../src/place/placer.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import type { DragonflyPeerView } from './dragonfly.ts';
import type { OipServer, OipServerOptions } from './oip-servers.ts';
import { freePort } from './ports.ts';
import { parseHostRules } from '../../src/policy/reach.ts';

export interface AgentReplica {
  peer: DragonflyPeerView;
  /** The agent's --root: the server's model repository. */
  root: string;
  agent: AgentServer;
  agentPort: number;
  server: OipServer;
  stop(): Promise<void>;
}

export interface AgentReplicaOptions {
  peer: DragonflyPeerView;
  /** A fresh directory of the replica's own (its model repository, token and credentials go in it). */
  dir: string;
  /** The agent's port on the peer's address. */
  port: number;
  /** The agent's token (what the operator reads from the ServedModel's tokenSecretRef). */
  token: string;
  /** The agent's storage credentials (S3 keys, as the mounted Secret holds them). */
  credentials: { accessKey: string; secretKey: string };
  /** Toward the daemon's proxy. */
  dispatcher: Dispatcher;
  start: (opts: OipServerOptions) => Promise<OipServer>;
  /**
   * The uid the agent is told the server runs as (--server-uid). Default: this process's, which the servers run
   * as here (root on the test machines): the agent then copies every file, a hard link being writable by them.
   */
  serverUid?: number | undefined;
}

export async function startAgentReplica(opts: AgentReplicaOptions): Promise<AgentReplica> {
  const { peer, dir } = opts;
  const root = join(dir, 'models');
  await mkdir(join(dir, 'creds'), { recursive: true });
  await mkdir(root);
  await writeFile(join(dir, 'token'), opts.token);
  await writeFile(join(dir, 'creds', 'access_key'), opts.credentials.accessKey);
  await writeFile(join(dir, 'creds', 'secret_key'), opts.credentials.secretKey);
  const agent = await startAgentServer({
    root,
    host: peer.ip,
    port: opts.port,
    proxy: peer.proxyURL,
    dispatcher: opts.dispatcher,
    // The daemon runs on this host: the model root is on its file system, at the same path.
    hardLinkRoot: root,
    serverUid: opts.serverUid ?? process.getuid?.(),
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
    token: tokenFile(join(dir, 'token')),
    credentials: credentialsDir(join(dir, 'creds')),
    // The test's store listens on loopback: the pod owner's list names it.
    storageHosts: parseHostRules('http://127.0.0.0/8'),
  });
  const server = await opts.start({ host: peer.ip, repository: root }).catch(async (err: unknown) => {
    await agent.close();
    throw err;
  });
  return {
    peer,
    root,
    agent,
    agentPort: opts.port,
    server,
    async stop() {
      await server.stop().catch(() => undefined);
      await agent.close().catch(() => undefined);
    },
  };
}

/** One emulated replica: an OIP emulator over `root`, with a real agent placing into it. */
export interface EmulatedReplica {
  root: string;
  agent: AgentServer;
  server: OipEmulator;
}

export interface EmulatedReplicas {
  /** The agents' port, the same on every replica's address (what the ServedModel's agent.port names). */
  port: number;
  replicas: EmulatedReplica[];
  close(): Promise<void>;
}

/**
 * The model servers of an integration test, without real servers or a real network: on each address of `ips` an
 * OIP emulator (Triton unless `flavour` says otherwise) with a real `peerload agent` beside it, downloading through
 * `proxy` (the peer-proxy emulator). Replica i keeps its model repository (`models`) and the agent's token under
 * `dir`/replica-i. The agents listen on `port` when given (a test that puts something in front of them), else on
 * one port free on every address.
 */
export async function startEmulatedReplicas(o: {
  ips: string[];
  dir: string;
  token: string;
  proxy: string;
  dispatcher: Dispatcher;
  port?: number;
  flavour?: OipFlavour;
}): Promise<EmulatedReplicas> {
  const port = o.port ?? (await portOnAll(o.ips));
  const replicas: EmulatedReplica[] = [];
  for (const [i, ip] of o.ips.entries()) {
    const dir = join(o.dir, `replica-${i}`);
    const root = join(dir, 'models');
    await mkdir(root, { recursive: true });
    await writeFile(join(dir, 'token'), o.token);
    const agent = await startAgentServer({
      root,
      host: ip,
      port,
      proxy: o.proxy,
      dispatcher: o.dispatcher,
      limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
      token: tokenFile(join(dir, 'token')),
    });
    replicas.push({ root, agent, server: await startOipEmulator(o.flavour ?? 'triton', root, ip) });
  }
  return {
    port,
    replicas,
    async close() {
      for (const r of replicas) {
        await r.agent.close();
        await r.server.close();
      }
    },
  };
}

/** Whether `port` can be listened on at `host` now. */
function portFree(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/** A port free on every one of these addresses: one ServedModel names one agent port for all its pods. */
export async function portOnAll(ips: string[]): Promise<number> {
  for (;;) {
    const port = await freePort(ips[0]);
    const free = await Promise.all(ips.slice(1).map((ip) => portFree(ip, port)));
    if (free.every(Boolean)) return port;
  }
}
