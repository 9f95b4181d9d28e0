/**
 * What the real-network rows (8, 11, 13) share: the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon 1.4.2
 * as a seed peer and node peers on their own 127.0.0.x addresses), MinIO behind a counting proxy (the origin's
 * bytes), a Node per node peer (its InternalIP the peer's address), the operator's ModelPreheat and ServedModel
 * controllers in-process, and a watch that notes when each ServedModel is Ready and each ModelPreheat succeeds.
 */
import { DeleteObjectCommand } from '@aws-sdk/client-s3';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Agent } from 'undici';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import type { KubeClient, KubeObject } from '../../src/runtime/index.ts';
import { startCountingProxy, type CountingProxy } from '../../test/support/counting-proxy.ts';
import {
  ROOT_USER,
  startDragonfly,
  type Dragonfly,
  type DragonflyOptions,
} from '../../test/support/dragonfly.ts';
import { ServiceEndpoints } from '../../test/support/endpointslices.ts';
import type { kubeConfig } from '../../test/support/kube.ts';
import { startMinIO, type MinIO } from '../../test/support/minio.ts';
import { buildLargeModelArchive, buildModelArchive } from '../../test/support/model-archive.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import { GVR, createSecret, isReady, operatorFlags, watchObjects } from './kube.ts';
import { progress, until } from './report.ts';

/** Steps to undo, run last-first by the scenario's finally block. */
export type Cleanup = (() => Promise<unknown>)[];

export interface RealNet {
  network: Dragonfly;
  minio: MinIO;
  /** MinIO's counting proxy: the endpoint every URL names. */
  origin: CountingProxy;
}

/** One timed case of a real-network row: a ServedModel on `n` replicas in one mode, in repetition `rep`. */
export interface RealNetRun<Mode> {
  mode: Mode;
  n: number;
  rep: number;
  /** create → all Ready, ms. */
  readyMs: number;
  /** create → the preheat job's end seen (its ModelPreheat SUCCESS), ms; undefined without one, or not seen by then. */
  jobEndMs?: number;
  /** Downloads whose node's daemon did not go back to the origin for the task (the preheated modes). */
  p2pHits?: number;
  originBytes: number;
}

/** Starts the network with `nodePeers` node peers and MinIO with `bucket`, behind a counting proxy. */
export async function startRealNet(
  cleanup: Cleanup,
  bucket: string,
  nodePeers: number,
  options: Omit<DragonflyOptions, 'nodePeers'> = {},
): Promise<RealNet> {
  const network = await startDragonfly({ ...options, nodePeers });
  cleanup.push(() => network.stop());
  const minio = await startMinIO();
  cleanup.push(() => minio.stop());
  await minio.createBucket(bucket);
  const origin = await startCountingProxy(minio.endpoint);
  cleanup.push(() => origin.close());
  return { network, minio, origin };
}

/**
 * Row `row`'s network as `startRealNet` starts it, with a work directory and one model archive of `sizeBytes`
 * (its bytes, put by the row under keys of its own) and the bucket as the clients reach it (the counting proxy).
 */
export async function startRealNetWithArchive(
  cleanup: Cleanup,
  row: number,
  nodePeers: number,
  sizeBytes: number,
): Promise<RealNet & { bucket: string; bytes: Buffer; location: ReturnType<MinIO['location']> }> {
  const name = `bench${row}`;
  const work = await mkdtemp(join(tmpdir(), `peerload-${name}-`));
  cleanup.push(() => rm(work, { recursive: true, force: true }));
  progress(`s${row}: starting Dragonfly (manager, scheduler, seed peer, ${nodePeers} node peers) and MinIO`);
  const net = await startRealNet(cleanup, name, nodePeers);
  const base = await buildModelArchive(work, { modelName: `${name}-base` });
  const bytes = await readFile((await buildLargeModelArchive(base, work, name, sizeBytes)).path);
  return { ...net, bucket: name, bytes, location: { ...net.minio.location(name), endpoint: net.origin.url } };
}

/**
 * A Node per node peer (`<ns>-node-<i>`) and the Secrets a ServedModel's preheat names: `s3` (MinIO's keys) and
 * `manager` (the manager's sign-in), plus `extra` ones. Returns the Nodes' names.
 */
export async function createNodesAndSecrets(
  kc: ReturnType<typeof kubeConfig>,
  kube: KubeClient,
  ns: string,
  net: RealNet,
  extra: Record<string, Record<string, string>> = {},
): Promise<string[]> {
  const nodes: string[] = [];
  for (const [i, peer] of net.network.peers.entries()) {
    nodes.push(`${ns}-node-${i}`);
    await ServiceEndpoints.createNode(kc, nodes[i]!, peer.ip);
  }
  const secrets: Record<string, Record<string, string>> = {
    s3: { access_key: net.minio.accessKey, secret_key: net.minio.secretKey },
    manager: { username: ROOT_USER.name, password: ROOT_USER.password },
    ...extra,
  };
  for (const [name, stringData] of Object.entries(secrets)) await createSecret(kube, ns, name, stringData);
  return nodes;
}

/** The ModelPreheat and ServedModel controllers of namespace `ns`, against the network's manager. */
export async function startOperator(
  cleanup: Cleanup,
  kc: ReturnType<typeof kubeConfig>,
  ns: string,
  net: RealNet,
  dispatcher: Agent,
  extraFlags: string[] = [],
): Promise<void> {
  const operator = await startManager(
    kc,
    operatorFlags(ns, {
      managerURL: net.network.managerURL,
      backoffStart: '500ms',
      // The ServedModels' preheat.manager names the manager by URL, with its sign-in Secret (refused unless allowed).
      extra: ['--allowed-manager-hosts', '127.0.0.1', ...extraFlags],
    }),
    [modelPreheatController, (ctx) => createServedModelController(ctx, { dispatcher })],
  );
  cleanup.push(() => operator.stop());
}

/** When (performance.now()) each ServedModel was first Ready and each ModelPreheat first SUCCESS, from watches. */
export interface Readiness {
  ready: Map<string, number>;
  preheated: Map<string, number>;
  /** The last version of each ServedModel seen. */
  latest: Map<string, KubeObject>;
}

export async function watchReadiness(cleanup: Cleanup, kube: KubeClient, ns: string): Promise<Readiness> {
  const r: Readiness = { ready: new Map(), preheated: new Map(), latest: new Map() };
  const smWatch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
    r.latest.set(obj.metadata.name, obj);
    if (!r.ready.has(obj.metadata.name) && isReady(obj)) r.ready.set(obj.metadata.name, at);
  });
  const mphWatch = watchObjects<ModelPreheat>(kube, GVR.modelPreheats, ns, (_t, obj, at) => {
    if (!r.preheated.has(obj.metadata.name) && obj.status?.state === 'SUCCESS')
      r.preheated.set(obj.metadata.name, at);
  });
  cleanup.push(
    async () => smWatch.stop(),
    async () => mphWatch.stop(),
  );
  await smWatch.ready;
  await mphWatch.ready;
  return r;
}

/** Waits until ServedModel `name` is Ready on `n` replicas (the watch's view); returns when (performance.now()). */
export async function untilReadyOn(r: Readiness, name: string, n: number): Promise<number> {
  let at = 0;
  await until(`${name} Ready on ${n}`, 600_000, () => {
    const sm = r.latest.get(name);
    if (sm && isReady(sm) && (sm.status as ServedModel['status'])?.readyReplicas === n)
      at ||= performance.now();
    return at > 0;
  });
  return at;
}

/** Whether `peer`'s daemon went back to the origin for task `taskID` (its log), i.e. the download was no P2P hit. */
export function backToSource(log: string, taskID: string | undefined): boolean {
  if (!taskID) return true;
  return log.split('\n').some((l) => l.includes(taskID) && l.includes('back to source'));
}

/**
 * Deletes `keys` of `bucket` and empties MinIO's trash, where a deleted object's data otherwise waits for MinIO's
 * own purge: objects of a GiB or two a run fill the one disk.
 */
export async function dropObjects(net: RealNet, bucket: string, keys: string[]): Promise<void> {
  for (const Key of keys)
    await net.minio.client.send(new DeleteObjectCommand({ Bucket: bucket, Key })).catch(() => undefined);
  const trash = join(net.minio.dataDir, '.minio.sys/tmp/.trash');
  for (const entry of await readdir(trash).catch(() => []))
    await rm(join(trash, entry), { recursive: true, force: true });
}
