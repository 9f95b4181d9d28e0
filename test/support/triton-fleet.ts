/**
 * Two real Triton replicas, each with a real `peerload agent` on its node peer's address, found through a Service's
 * EndpointSlices as in a cluster, and the operator (both controllers) signing in to the real manager: the set-up of
 * the real-network ServedModel tests whose model is a source (an OCI artifact, a Hub repository). More servers
 * (MLServer) join the same nodes as a Service of their own, their agents on a port of their own.
 */
import type * as k8s from '@kubernetes/client-node';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent } from 'undici';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { ROOT_USER, type DragonflyView } from './dragonfly.ts';
import { ServiceEndpoints, loopbackDispatcher } from './endpointslices.ts';
import { ECHO_CONFIG_PBTXT } from './oip-exchanges.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from './oip-replicas.ts';
import { startTriton, type OipServer, type OipServerOptions } from './oip-servers.ts';
import { startManager, type RunningManager } from './runtime-harness.ts';

export interface TritonFleet {
  replicas: AgentReplica[];
  agentPort: number;
  operator: RunningManager;
  nodeOf: (i: number) => string;
  /**
   * One replica of another server per node peer, with its agent on a port free on every peer's address, behind the
   * Service `service` (the operator reaches them as it reaches the Tritons); stopped with the fleet.
   */
  addServers(service: string, start: (opts: OipServerOptions) => Promise<OipServer>): Promise<ServerPair>;
  stop(): Promise<void>;
}

/** Replicas of one server on the fleet's nodes (replica i on node peer i) and their agents' port. */
export interface ServerPair {
  replicas: AgentReplica[];
  agentPort: number;
}

export interface TritonFleetOptions {
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  ns: string;
  work: string;
  network: DragonflyView;
  /** The agents' token (Secret `agent-token`, key `token`). */
  agentToken: string;
  /** Echo models whose config sits beside their versions, as the example's init container copies it. */
  models: string[];
  /** More Secrets of the namespace, beside `agent-token` and `manager-user`. */
  secrets?: Record<string, Record<string, string>>;
  /** The agents' object-storage keys, for models of `files` (default: none, a source's files need none). */
  agentCredentials?: { accessKey: string; secretKey: string } | undefined;
  /** Operator flags beside leader election off, the manager and its allowed host, and a brisk poll. */
  flags: string[];
}

export async function startTritonFleet(o: TritonFleetOptions): Promise<TritonFleet> {
  const dispatcher = new Agent();
  const replicas: AgentReplica[] = [];
  const nodeOf = (i: number) => `${o.ns}-node-${i}`;
  /** Replicas of `label` on each node peer, their agents on a port free on every peer's address (not taken yet). */
  const startOnPeers = async (label: string, start: (opts: OipServerOptions) => Promise<OipServer>) => {
    const port = await portOnAll(o.network.peers.map((p) => p.ip));
    const started: AgentReplica[] = [];
    for (const [i, peer] of o.network.peers.entries()) {
      const replica = await startAgentReplica({
        peer,
        dir: join(o.work, `${label}-${i}`),
        port,
        token: o.agentToken,
        // Without a bucket: the agent's storage keys are never used for a source's files.
        credentials: o.agentCredentials ?? { accessKey: 'unused', secretKey: 'unused-secret' },
        dispatcher,
        start,
      });
      replicas.push(replica);
      started.push(replica);
    }
    return { replicas: started, agentPort: port };
  };
  const tritons = await startOnPeers('triton', startTriton);
  const agentPort = tritons.agentPort;
  for (const [i, peer] of o.network.peers.entries()) {
    const replica = tritons.replicas[i]!;
    for (const model of o.models) {
      await mkdir(join(replica.root, model));
      await writeFile(join(replica.root, model, 'config.pbtxt'), ECHO_CONFIG_PBTXT);
    }
    await ServiceEndpoints.createNode(o.kc, nodeOf(i), peer.ip);
  }
  const secrets = {
    'agent-token': { token: o.agentToken },
    'manager-user': { username: ROOT_USER.name, password: ROOT_USER.password },
    ...o.secrets,
  };
  for (const [name, stringData] of Object.entries(secrets))
    await o.core.createNamespacedSecret({ namespace: o.ns, body: { metadata: { name }, stringData } });
  const services = [new ServiceEndpoints(o.kc, o.ns, 'triton')];
  for (const [i, r] of tritons.replicas.entries())
    await services[0]!.add(`triton-${i}`, r.server.url, true, nodeOf(i));
  const hostOf = (a: string) => services.map((s) => s.hostOf(a)).find((h) => h !== undefined);
  const base = [
    '--no-leader-elect',
    '--manager-url',
    o.network.managerURL,
    '--allowed-manager-hosts',
    '127.0.0.1',
  ];
  const operator = await startManager(
    o.kc,
    [...base, '--poll-backoff-start', '1s', '--poll-backoff-max', '5s', ...o.flags],
    [
      modelPreheatController,
      // Slices hold 198.18.x addresses: the operator reaches each replica (server and agent) at its peer's address.
      (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher(hostOf) }),
    ],
  );
  return {
    replicas: tritons.replicas,
    agentPort,
    operator,
    nodeOf,
    async addServers(service, start) {
      const pair = await startOnPeers(service, start);
      const svc = new ServiceEndpoints(o.kc, o.ns, service);
      services.push(svc);
      for (const [i, r] of pair.replicas.entries())
        await svc.add(`${service}-${i}`, r.server.url, true, nodeOf(i));
      return pair;
    },
    async stop() {
      await operator.stop();
      for (const i of replicas.keys()) await o.core.deleteNode({ name: nodeOf(i) }).catch(() => undefined);
      for (const r of replicas) await r.stop();
      await dispatcher.close();
    },
  };
}
