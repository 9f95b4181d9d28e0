/**
 * A Triton ServedModel of a multi-file model through the OPERATOR, on the REAL Dragonfly network (manager and
 * scheduler v2.5.1, dfdaemon 1.4.2: the run's shared one, test/support/shared-dragonfly.ts, its seed peer and two of
 * its node peers), from MinIO behind a counting proxy (its own port: its URLs, so its task ids, are this file's alone). Two real Triton 2.51.0 replicas, each with a real `peerload agent` beside it, listen on
 * their node peer's address; the operator (the ModelPreheat and ServedModel controllers, the real manager) finds
 * them through the EndpointSlices of a Service (each endpoint names its node; each Node's InternalIP is its peer's
 * address), as in a cluster:
 *   - `{ driver: triton, agent, files: {prefix}, version: '1', preheat: {create: true} }` lists the prefix and
 *     preheats every file on the replicas' nodes in one manager job; each replica's agent places the version through
 *     its node's peer as soon as that node's job is created (joining the task the preheat runs there: no node peer
 *     goes to MinIO for the data file), and Triton loads it: Ready 2/2, the data file served by MinIO once in all;
 *   - version '2' (another prefix) waits for its own preheat job, then rolls out on both the same way; version 1 is
 *     unloaded and its directory removed;
 *   - deleting the ServedModel unloads the model on both and lets the finalizer go.
 */
import * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, type DragonflyView } from '../support/dragonfly.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import { waitFor } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from '../support/oip-replicas.ts';
import { startTriton } from '../support/oip-servers.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';
import { expectCrossings, PREHEATED_ON_BOTH, type CrossingBounds } from '../support/origin-crossings.ts';
import type { RunningManager } from '../support/runtime-harness.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';

const BUCKET = fileBucket('models');
const TOKEN = 'triton-sm-agent-token-0123456789';
const FILES = ['model.py', 'offset.json', 'weights.bin'];
const WEIGHTS: Record<string, Buffer> = {
  '1': randomBytes(5 * 1024 * 1024),
  '2': randomBytes(5 * 1024 * 1024),
};

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let peerload: PeerloadNamespace;
let work: string;
let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let dispatcher: Agent;
let svc: ServiceEndpoints;
let operator: RunningManager;
let jwt: string;
let agentPort: number;
const replicas: AgentReplica[] = [];
/** Each object's size, by key. */
const sizes = new Map<string, number>();

const prefixOf = (version: string) => `triton/echo/${version}/`;
const nodeOf = (i: number) => `${ns}-node-${i}`;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('triton-sm'));
  work = await mkdtemp(join(tmpdir(), 'peerload-triton-sm-'));

  network = await sharedDragonfly(inject('dragonflyService'), 2);
  jwt = await network.signIn();
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  origin = await startCountingProxy(minio.endpoint);
  for (const v of ['1', '2']) {
    const objects: Record<string, Buffer> = {
      'model.py': Buffer.from(ECHO_MODEL_PY),
      'offset.json': Buffer.from(JSON.stringify({ offset: Number(v) })),
      'weights.bin': WEIGHTS[v]!,
    };
    for (const [p, body] of Object.entries(objects)) {
      await minio.putObject(BUCKET, `${prefixOf(v)}${p}`, body);
      sizes.set(`${prefixOf(v)}${p}`, body.length);
    }
  }

  dispatcher = new Agent();
  agentPort = await portOnAll(network.peers.map((p) => p.ip));
  for (const [i, peer] of network.peers.entries()) {
    const replica = await startAgentReplica({
      peer,
      dir: join(work, `triton-${i}`),
      port: agentPort,
      token: TOKEN,
      credentials: minio,
      dispatcher,
      start: startTriton,
    });
    replicas.push(replica);
    // The model's config beside its versions, as the example's init container copies it from a ConfigMap.
    await mkdir(join(replica.root, 'echo'));
    await writeFile(join(replica.root, 'echo/config.pbtxt'), ECHO_CONFIG_PBTXT);
    await ServiceEndpoints.createNode(kc, nodeOf(i), peer.ip);
  }

  const secrets: Record<string, Record<string, string>> = {
    's3-credentials': { access_key: minio.accessKey, secret_key: minio.secretKey },
    'manager-user': { username: ROOT_USER.name, password: ROOT_USER.password },
    'agent-token': { token: TOKEN },
  };
  for (const [name, stringData] of Object.entries(secrets))
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name }, stringData } });
  svc = new ServiceEndpoints(kc, ns, 'triton');
  for (const [i, r] of replicas.entries()) await svc.add(`triton-${i}`, r.server.url, true, nodeOf(i));

  // Slices hold 198.18.x addresses: the operator reaches each replica (server and agent) at its peer's address.
  operator = await startRealNetworkOperator(kc, network.managerURL, [], { hosts: (a) => svc.hostOf(a) });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await operator?.stop();
  for (const i of [0, 1]) await core?.deleteNode({ name: nodeOf(i) }).catch(() => undefined);
  for (const r of replicas) await r.stop();
  await dispatcher?.close();
  await Promise.allSettled([origin?.close(), minio?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

const spec = (version: string) => ({
  modelName: 'echo',
  version,
  files: { prefix: prefixOf(version) },
  modelServer: {
    driver: 'triton',
    service: { name: 'triton' },
    agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
  },
  preheat: {
    create: true,
    objectStorage: {
      type: 's3',
      bucket: BUCKET,
      endpoint: origin.url,
      pathStyle: true,
      region: minio.region,
      credentialsSecretRef: { name: 's3-credentials' },
    },
    manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
  },
});

/** The ServedModel once it is Ready on every replica at its current generation, with `version` on each. */
async function readyAt(version: string, timeoutMs = 300_000): Promise<ServedModel> {
  return (await waitFor(
    `echo Ready 2/2 at version ${version}`,
    async () => {
      const o = await peerload.getServedModel('echo');
      const ready = o.status?.conditions?.find((c) => c.type === 'Ready');
      return o.status?.ready === '2/2' &&
        o.status.observedGeneration === o.metadata?.generation &&
        ready?.status === 'True' &&
        o.status.replicas?.every((r) => r.version === version)
        ? o
        : undefined;
    },
    { timeoutMs, intervalMs: 1000 },
  ))!;
}

/** The manager's own record of a job. */
async function managerJob(id: number): Promise<{ args: { urls?: string[]; ips?: string[] | null } }> {
  const res = await fetch(`${network.managerURL}/api/v1/jobs/${id}`, {
    headers: { authorization: `Bearer ${jwt}` },
  });
  return (await res.json()) as { args: { urls?: string[]; ips?: string[] | null } };
}

/** What MinIO served for a version's files, preheat and placements together, within `bounds`. */
const expectServed = (version: string, bounds: CrossingBounds) =>
  expectCrossings(
    FILES.map((p) => [`${prefixOf(version)}${p}`, sizes.get(`${prefixOf(version)}${p}`)!]),
    (key) => origin.bytesServed(`/${BUCKET}/${key}`),
    bounds,
  );

/** What MinIO was asked for a version's files (method, range, status, body bytes), for the log. */
const originRequests = (version: string) =>
  origin.requests
    .filter((r) => r.url.includes(prefixOf(version)))
    .map((r) => `${r.method} ${r.url.split('?')[0]} ${r.range ?? ''} ${r.status} ${r.bytes}`);

/**
 * The owned ModelPreheat of a version, once it succeeded (replicas may be Ready before: their downloads join the
 * job's tasks): one job with every file's URL, on both replicas' nodes, each node peer preheated.
 */
async function expectPreheated(version: string): Promise<ModelPreheat> {
  const preheat = (await waitFor(
    `echo-preheat SUCCESS for version ${version}`,
    async () => {
      const o = await peerload.getModelPreheat('echo-preheat');
      return o.spec.objectStorage?.prefix === prefixOf(version) && o.status?.state === 'SUCCESS'
        ? o
        : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 1000 },
  ))!;
  expect(preheat.status?.conditions?.find((c) => c.type === 'Succeeded')?.status).toBe('True');
  expect(preheat.status?.files).toMatchObject({ count: FILES.length, jobsTotal: 1, jobsSucceeded: 1 });
  expect(preheat.status?.jobs).toHaveLength(1);
  const job = await managerJob(preheat.status!.jobs![0]!.id);
  const paths = (job.args.urls ?? []).map((u) => new URL(u).pathname).sort();
  expect(paths).toEqual(FILES.map((p) => `/${BUCKET}/${prefixOf(version)}${p}`));
  expect(job.args.ips?.slice().sort()).toEqual(network.peers.map((p) => p.ip).sort());
  expect(preheat.status?.peers?.map((p) => [p.ip, p.state]).sort()).toEqual(
    network.peers.map((p) => [p.ip, 'Preheated']).sort(),
  );
  return preheat;
}

/**
 * The data file of a version was a P2P hit on both node peers: each handled the preheat's task (its id in the
 * daemon's log) and neither went back to the source for it (the seed peer did, once). Files up to a piece are
 * fetched from the origin by each peer itself (docs/dragonfly.md), so they are left out.
 */
async function expectP2PHits(preheat: ModelPreheat, version: string): Promise<void> {
  const path = `/${BUCKET}/${prefixOf(version)}weights.bin`;
  const task = preheat.status?.tasks?.find((t) => new URL(t.url).pathname === path);
  expect(task, JSON.stringify(preheat.status?.tasks)).toBeDefined();
  for (const peer of network.peers) {
    const lines = (await peer.logs()).split('\n').filter((l) => l.includes(task!.taskID));
    expect(lines.length, peer.name).toBeGreaterThan(0);
    expect(
      lines.filter((l) => l.includes('back to source')),
      peer.name,
    ).toEqual([]);
  }
}

/**
 * Each agent placed `version` after the version's preheat job was created: a replica's gate waits for its node's
 * job (the download then joins the task the job runs on its node's peer), never for an earlier version's.
 */
function expectPlacedAfterJob(preheat: ModelPreheat, version: string): void {
  const jobCreated = Date.parse(preheat.status!.startedAt!);
  for (const r of replicas) {
    const placed = r.agent.versions.get('echo')?.get(version);
    expect(placed?.state, r.peer.name).toBe('Ready');
    expect(
      Date.parse(placed!.startedAt),
      `${r.peer.name} placed at ${placed!.startedAt}, job ${jobCreated}`,
    ).toBeGreaterThanOrEqual(jobCreated);
  }
}

/** Each replica serves `version` (and no other), its data file placed, answering an inference. */
async function expectServing(version: string, sm: ServedModel): Promise<void> {
  for (const [i, r] of replicas.entries()) {
    // The old version goes once the new one serves everywhere: wait for it rather than race the pass.
    await waitFor(
      `${r.peer.name} serves version ${version} alone`,
      async () => (await servedVersions(r.server, 'echo')).join() === version,
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    const file = join(r.root, `echo/${version}/weights.bin`);
    expect(await readFile(file)).toEqual(WEIGHTS[version]);
    // Triton runs as root here, so the agent never leaves it a hard link of the daemon's file, even for a local
    // hit (the node's task had finished): a copy, one name.
    expect(sm.status!.replicas!.some((s) => s.node === nodeOf(i))).toBe(true);
    expect((await stat(file)).nlink).toBe(1);
    const answer = await inferEcho(r.server, [1, 2]);
    const offset = Number(version);
    expect(answer).toMatchObject({ model_version: version, outputs: [{ data: [1 + offset, 2 + offset] }] });
  }
}

describe('a Triton ServedModel of a directory through the operator, on the real network', () => {
  it('preheats the nodes in one job; both replicas place version 1 through their node’s peer and load it: Ready 2/2', async () => {
    await peerload.createServedModel('echo', spec('1'));
    const sm = await readyAt('1');
    const seen = JSON.stringify(sm.status?.replicas);
    console.log(`version 1 Ready: ${seen}`);
    expect(sm.status?.readyReplicas).toBe(2);
    expect(sm.status?.servedVersion).toBe('1');
    expect(sm.metadata?.finalizers?.length, seen).toBeGreaterThan(0);
    expect(
      sm.status!.replicas!.map((r) => [r.node, r.nodeIP, r.phase, r.registered, typeof r.localHit]).sort(),
      seen,
    ).toEqual(network.peers.map((p, i) => [nodeOf(i), p.ip, 'Ready', true, 'boolean']).sort());

    const preheat = await expectPreheated('1');
    expectPlacedAfterJob(preheat, '1');
    await expectP2PHits(preheat, '1');
    // The data file crossed once in all (the seed peer's fetch); the smaller files once per peer at most.
    const served = expectServed('1', PREHEATED_ON_BOTH);
    console.log(`version 1: MinIO served ${JSON.stringify(served)}\n${originRequests('1').join('\n')}`);
    await expectServing('1', sm);
  });

  it('rolls both replicas to version 2 (another prefix): version 1 is unloaded and its directory removed', async () => {
    await peerload.patchServedModel('echo', { spec: { version: '2', files: { prefix: prefixOf('2') } } });
    const sm = await readyAt('2');
    console.log(`version 2 Ready: ${JSON.stringify(sm.status?.replicas)}`);
    expect(sm.status?.servedVersion).toBe('2');
    expect(sm.status!.replicas!.map((r) => [r.phase, r.registered])).toEqual([
      ['Ready', true],
      ['Ready', true],
    ]);
    const preheat = await expectPreheated('2');
    // Version 2's placements waited for version 2's job (version 1's success opened no gate for it), and no node
    // peer went to MinIO for its data file.
    expectPlacedAfterJob(preheat, '2');
    await expectP2PHits(preheat, '2');
    const served = expectServed('2', PREHEATED_ON_BOTH);
    console.log(`version 2: MinIO served ${JSON.stringify(served)}\n${originRequests('2').join('\n')}`);
    await expectServing('2', sm);
    for (const r of replicas)
      await waitFor(
        'version 1 removed',
        () =>
          stat(join(r.root, 'echo/1')).then(
            () => false,
            () => true,
          ),
        { timeoutMs: 60_000, intervalMs: 500 },
      );
  });

  it('deleting the ServedModel unloads the model on both replicas and lets the finalizer go', async () => {
    await peerload.deleteServedModel('echo');
    await waitFor('echo gone', () => peerload.servedModelGone('echo'), {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    for (const r of replicas) {
      expect(await servedVersions(r.server, 'echo')).toEqual([]);
      await expect(stat(join(r.root, 'echo/2'))).rejects.toThrow(/ENOENT/);
    }
  });
});
