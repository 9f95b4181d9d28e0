/**
 * Two real Triton replicas, each with a real `peerload agent` on its node peer's address, found through a Service's
 * EndpointSlices as in a cluster, and the operator (both controllers) signing in to the real manager: the set-up of
 * the real-network ServedModel tests whose model is a source (an OCI artifact, a Hub repository).
 */
import type * as k8s from '@kubernetes/client-node';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent } from 'undici';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { ROOT_USER, type Dragonfly } from './dragonfly.ts';
import { ServiceEndpoints, loopbackDispatcher } from './endpointslices.ts';
import { ECHO_CONFIG_PBTXT } from './oip-exchanges.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from './oip-replicas.ts';
import { startTriton } from './oip-servers.ts';
import { startManager, type RunningManager } from './runtime-harness.ts';

export interface TritonFleet {
  replicas: AgentReplica[];
  agentPort: number;
  operator: RunningManager;
  nodeOf: (i: number) => string;
  stop(): Promise<void>;
}

export interface TritonFleetOptions {
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  ns: string;
  work: string;
  network: Dragonfly;
  /** The agents' token (Secret `agent-token`, key `token`). */
  agentToken: string;
  /** Echo models whose config sits beside their versions, as the example's init container copies it. */
  models: string[];
  /** More Secrets of the namespace, beside `agent-token` and `manager-user`. */
  secrets?: Record<string, Record<string, string>>;
  /** Operator flags beside leader election off, the manager and its allowed host, and a brisk poll. */
  flags: string[];
}

export async function startTritonFleet(o: TritonFleetOptions): Promise<TritonFleet> {
  const dispatcher = new Agent();
  const replicas: AgentReplica[] = [];
  const nodeOf = (i: number) => `${o.ns}-node-${i}`;
  const agentPort = await portOnAll(o.network.peers.map((p) => p.ip));
  for (const [i, peer] of o.network.peers.entries()) {
    const replica = await startAgentReplica({
      peer,
      dir: join(o.work, `triton-${i}`),
      port: agentPort,
      token: o.agentToken,
      // No bucket here: the agent's storage keys are never used for a source's files.
      credentials: { accessKey: 'unused', secretKey: 'unused-secret' },
      dispatcher,
      start: startTriton,
    });
    replicas.push(replica);
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
  const svc = new ServiceEndpoints(o.kc, o.ns, 'triton');
  for (const [i, r] of replicas.entries()) await svc.add(`triton-${i}`, r.server.url, true, nodeOf(i));
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
      (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher((a) => svc.hostOf(a)) }),
    ],
  );
  return {
    replicas,
    agentPort,
    operator,
    nodeOf,
    async stop() {
      await operator.stop();
      for (const i of replicas.keys()) await o.core.deleteNode({ name: nodeOf(i) }).catch(() => undefined);
      for (const r of replicas) await r.stop();
      await dispatcher.close();
    },
  };
}
