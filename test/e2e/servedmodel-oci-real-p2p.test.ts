/**
 * ServedModels whose model is an OCI artifact (spec.source.oci) through the OPERATOR, on the REAL Dragonfly network
 * (manager and scheduler v2.5.1, dfdaemon 1.4.2: the run's shared one, test/support/shared-dragonfly.ts, its seed
 * peer and two of its node peers), from the REAL registry (Distribution v3) behind a counting proxy (its own port:
 * its blob URLs, so their task ids, are this file's alone), for both servers that load directories through
 * the agent. Real `modctl` pushes one version of each model as a ModelPack artifact; two replicas of each server,
 * each with a real `peerload agent` beside it, listen on their node peer's address and are found through the
 * EndpointSlices of a Service, as in a cluster:
 *   - real Triton 2.51.0 serves the echo model (a 6 MiB raw weights layer, a raw config layer, a tar code layer);
 *   - real MLServer 1.7.1 serves a scikit-learn model (model-settings.json and model.joblib as raw layers, and a
 *     6 MiB raw data layer its loader ignores).
 *
 * The registry is anonymous, so each owned ModelPreheat is a `type: file` job of the layers' blob URLs (the real
 * manager's image preheat refuses to dial a loopback registry): it is created on the real manager (Triton's is
 * waited for until SUCCESS; MLServer's is not, to spare the manager's 30 s state sync), its status.tasks are the
 * task ids the agents' downloads got from their node's daemon, the 6 MiB blob crosses from the registry
 * once in all, every placed file hashes to its layer's digest (a tar layer is extracted). Ready 2/2, the server
 * answers an inference on each replica, and deleting the ServedModel unloads it on both.
 */
import * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { taskID } from '../../src/storage/taskid.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import type { DragonflyView } from '../support/dragonfly.ts';
import { waitFor } from '../support/kube.ts';
import { modctl, pushMLServerVersion, pushTritonVersion, type Modctl } from '../support/modctl.ts';
import { blobReads, layerFilePath, pushedManifest, sha256, type Layer } from '../support/oci-blobs.ts';
import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { startMLServer, writeSklearnModel, type OipServer } from '../support/oip-servers.ts';
import type { AgentReplica } from '../support/oip-replicas.ts';
import { startTritonFleet, type ServerPair, type TritonFleet } from '../support/triton-fleet.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { sharedDragonfly } from '../support/shared-dragonfly.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';

const TOKEN = 'triton-oci-agent-token-0123456789';
const WEIGHTS = randomBytes(6 * 1024 * 1024);
const OFFSET = 3;
/** The minimum piece length of dfdaemon 1.4.2: content up to it is fetched by each peer from the origin itself. */
const MIN_PIECE = 4 * 1024 * 1024;

let kc: k8s.KubeConfig;
let peerload: PeerloadNamespace;
let core: k8s.CoreV1Api;
let ns: string;
let work: string;
let network: DragonflyView;
let fleet: TritonFleet;
let registry: Registry;
let origin: CountingProxy;
let jwt: string;
let m: Modctl;
/** The echo artifact's reference, through the counting proxy: every blob read the registry serves is counted. */
let reference: string;
/** Requests the registry saw before the echo ServedModel (modctl's push). */
let pushed: number;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('triton-oci'));
  work = await mkdtemp(join(tmpdir(), 'peerload-triton-oci-'));

  network = await sharedDragonfly(inject('dragonflyService'), 2);
  jwt = await network.signIn();
  registry = await startRegistry();
  origin = await startCountingProxy(registry.url);
  reference = `${new URL(origin.url).host}/models/echo:v1`;
  m = await modctl(join(work, 'modctl'));
  await pushTritonVersion(m, join(work, 'src'), reference, {
    weights: WEIGHTS,
    offset: JSON.stringify({ offset: OFFSET }),
    code: ECHO_MODEL_PY,
  });
  pushed = origin.requests.length;

  fleet = await startTritonFleet({
    kc,
    core,
    ns,
    work,
    network,
    agentToken: TOKEN,
    models: ['echo'],
    flags: ['--allowed-registry-hosts', 'http://127.0.0.1'],
  });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await fleet?.stop();
  await origin?.close();
  await registry?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

/** Where the agent reports a layer: a raw layer as its file path, a tar layer as its blob. */
const placedPath = (l: Layer) =>
  l.mediaType.endsWith('.raw') ? rawPath(l) : `sha256-${l.digest.slice('sha256:'.length)}`;

/** The path of a raw layer's file in the version directory. */
const rawPath = layerFilePath;

/** The manifest modctl pushed as `models/<name>:<tag>`, read straight from the registry (not counted). */
const manifestOf = (name = 'echo', tag = 'v1') => pushedManifest(registry.url, `models/${name}`, tag);

/** The manager's own record of a job. */
async function managerJob(id: number): Promise<{ state: string; args: { type?: string; urls?: string[] } }> {
  const res = await fetch(`${network.managerURL}/api/v1/jobs/${id}`, {
    headers: { authorization: `Bearer ${jwt}` },
  });
  return (await res.json()) as { state: string; args: { type?: string; urls?: string[] } };
}

/** A ServedModel of `modelName` at `version` from the artifact `ref`, its preheat owned, on the driver's Service. */
async function createSourceServedModel(o: {
  modelName: string;
  version: string;
  ref: string;
  driver: 'triton' | 'mlserver';
  agentPort: number;
}): Promise<void> {
  await peerload.createServedModel(o.modelName, {
    modelName: o.modelName,
    version: o.version,
    source: { oci: { reference: o.ref, plainHTTP: true } },
    modelServer: {
      driver: o.driver,
      service: { name: o.driver },
      agent: { port: o.agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
    },
    preheat: {
      create: true,
      manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
    },
  });
}

/**
 * Waits for the ServedModel `name` to be Ready 2/2 at `version`, and checks what status says: the artifact's
 * digest and layer count, each replica Ready and registered on its node.
 */
async function expectReady(
  name: string,
  version: string,
  source: { reference: string; digest: string; layers: number },
  started: number,
): Promise<void> {
  const sm = await peerload.untilServedModel(
    name,
    `Ready 2/2 at version ${version}`,
    (o) =>
      o.status?.ready === '2/2' &&
      o.status.observedGeneration === o.metadata.generation &&
      conditionOf(o, 'Ready')?.status === 'True' &&
      o.status.replicas?.every((r) => r.version === version) === true,
    { timeoutMs: 300_000, intervalMs: 1000 },
  );
  console.log(`${name} Ready 2/2 after ${Date.now() - started} ms: ${JSON.stringify(sm.status?.replicas)}`);
  expect(sm.status!.source).toMatchObject({
    oci: { reference: source.reference, digest: source.digest },
    layers: source.layers,
  });
  expect(
    sm.status!.replicas!.map((r) => [r.node, r.nodeIP, r.phase, r.registered]).sort(),
    JSON.stringify(sm.status?.replicas),
  ).toEqual(network.peers.map((p, i) => [fleet.nodeOf(i), p.ip, 'Ready', true]).sort());
}

/**
 * The owned preheat `<name>-preheat`: a file job of the layers' blob URLs on the real manager, its status.tasks each
 * blob URL's task id as the daemon computes it. With `succeeded`, waits for the job's SUCCESS (the manager reports
 * it about 30 s after the peers finish: its state sync); else for the job's creation. Returns the task id by URL.
 */
async function expectFilePreheat(
  name: string,
  layerURLs: string[],
  o: { started: number; succeeded: boolean },
): Promise<Map<string, string>> {
  const preheat = await peerload.untilModelPreheat(
    `${name}-preheat`,
    o.succeeded ? 'SUCCESS' : 'created on the manager',
    (p) => (o.succeeded ? p.status?.state === 'SUCCESS' : p.status?.jobID !== undefined),
    { timeoutMs: 180_000, intervalMs: 1000 },
  );
  console.log(`${name}-preheat ${preheat.status?.state} after ${Date.now() - o.started} ms`);
  expect(preheat.spec).toMatchObject({ type: 'file' });
  expect([...(preheat.spec.urls ?? [])].sort()).toEqual([...layerURLs].sort());
  if (o.succeeded) expect(conditionOf(preheat, 'Succeeded')?.status).toBe('True');
  expect(preheat.status?.jobID).toBeGreaterThan(0);
  const job = await managerJob(preheat.status!.jobID!);
  if (o.succeeded) expect(job.state).toBe('SUCCESS');
  expect(job.args.type).toBe('file');
  expect([...(job.args.urls ?? [])].sort()).toEqual([...layerURLs].sort());
  const tasks = preheat.status!.tasks!;
  expect([...tasks].sort((a, b) => a.url.localeCompare(b.url))).toEqual(
    [...layerURLs].sort().map((url) => ({ url, taskID: taskID({ url }) })),
  );
  return new Map(tasks.map((t) => [t.url, t.taskID]));
}

/**
 * What one replica's agent placed for `model` `version`: each layer's file joined the preheat's task of its blob
 * (X-Dragonfly-Task-ID of the agent's download), and every raw layer's file hashes to the layer's digest.
 */
async function expectPlaced(
  r: AgentReplica,
  model: string,
  version: string,
  manifest: { layers: Layer[] },
  taskOf: (l: Layer) => string | undefined,
): Promise<string> {
  const placed = r.agent.versions.get(model)?.get(version);
  expect(placed?.state, r.peer.name).toBe('Ready');
  console.log(`${r.peer.name} placed ${JSON.stringify(placed!.files)}`);
  expect(placed!.files.map((f) => [f.path, f.taskID]).sort(), r.peer.name).toEqual(
    manifest.layers.map((l) => [placedPath(l), taskOf(l)]).sort(),
  );
  const dir = join(r.root, model, version);
  for (const l of manifest.layers.filter((x) => x.mediaType.endsWith('.raw')))
    expect(sha256(await readFile(join(dir, rawPath(l)!))), `${r.peer.name} ${rawPath(l)}`).toBe(l.digest);
  return dir;
}

/**
 * What the registry served per blob since `since` (a request count), preheat and placements together. A blob above
 * the minimum piece length crossed once (the seed peer's back-to-source), plus a 1-byte range probe from each peer
 * that started a download of it (the seed peer, each node peer for its preheat and maybe once more for its agent's
 * download racing the preheat's probe: 5 at most). A blob up to it never travels between peers (dfdaemon 1.4.2
 * serves such content from the origin to each peer that asks), so it may cross once per peer that downloads it: the
 * seed peer and the two node peers. Returns the body bytes the registry served in all.
 */
function expectBlobReads(layers: Layer[], since: number): number {
  const reads = blobReads(origin, since);
  console.log(`registry blob reads since the push: ${JSON.stringify(reads)}`);
  for (const l of layers) {
    const r = reads[l.digest]!;
    expect(r.data, `${l.digest}: ${r.gets.join(', ')}`).toBeGreaterThanOrEqual(l.size);
    expect(r.probes, `${l.digest}: ${r.gets.join(', ')}`).toBeLessThanOrEqual(5);
    if (l.size > MIN_PIECE) expect(r.data, `${l.digest} read once: ${r.gets.join(', ')}`).toBe(l.size);
    else expect(r.data, `${l.digest}: ${r.gets.join(', ')}`).toBeLessThanOrEqual(3 * l.size);
  }
  expect(layers.some((l) => l.size > MIN_PIECE)).toBe(true);
  return layers.reduce((sum, l) => sum + reads[l.digest]!.data, 0);
}

/** Deletes the ServedModel `name` and waits until its finalizer let it go. */
async function deleteServedModel(name: string): Promise<void> {
  await peerload.deleteServedModel(name);
  await waitFor(`${name} gone`, () => peerload.servedModelGone(name), {
    timeoutMs: 180_000,
    intervalMs: 1000,
  });
}

describe('a Triton ServedModel from a modctl-pushed ModelPack artifact through the operator, on the real network', () => {
  it('is Ready 2/2: the layers preheated as files on the real manager, the agents joined those tasks, the weights blob read from the registry once', async () => {
    const manifest = await manifestOf();
    const blobURL = (digest: string) => `${origin.url}/v2/models/echo/blobs/${digest}`;
    const started = Date.now();
    await createSourceServedModel({
      modelName: 'echo',
      version: '1',
      ref: reference,
      driver: 'triton',
      agentPort: fleet.agentPort,
    });
    await expectReady('echo', '1', { reference, digest: manifest.digest, layers: 3 }, started);
    const byURL = await expectFilePreheat(
      'echo',
      manifest.layers.map((l) => blobURL(l.digest)),
      { started, succeeded: true },
    );

    for (const [i, r] of fleet.replicas.entries()) {
      const dir = await expectPlaced(r, 'echo', '1', manifest, (l) => byURL.get(blobURL(l.digest)));
      // The tar layer: one file extracted (model.py); the raw layers are files of their own.
      const placed = r.agent.versions.get('echo')!.get('1')!;
      expect(manifest.layers.filter((l) => /\.tar$/.test(l.mediaType))).toHaveLength(1);
      expect(placed.files.filter((f) => f.path.startsWith('sha256-')).map((f) => f.extracted)).toEqual([1]);
      // Triton's Python backend writes __pycache__ beside model.py once it loads it.
      expect((await readdir(dir)).filter((n) => n !== '__pycache__').sort()).toEqual([
        'model.py',
        'offset.json',
        'weights.bin',
      ]);
      expect(await readFile(join(dir, 'model.py'), 'utf8')).toBe(ECHO_MODEL_PY);

      await waitFor(`${r.peer.name} serves version 1`, async () =>
        (await servedVersions(r.server, 'echo')).join() === '1' ? true : undefined,
      );
      const answer = await inferEcho(r.server, [1, 2]);
      expect(answer, fleet.nodeOf(i)).toMatchObject({
        model_version: '1',
        outputs: [{ data: [1 + OFFSET, 2 + OFFSET] }],
      });
    }
    expectBlobReads(manifest.layers, pushed);
  });

  it('deleting the ServedModel unloads the model on both replicas and lets the finalizer go', async () => {
    await deleteServedModel('echo');
    for (const r of fleet.replicas) {
      expect(await servedVersions(r.server, 'echo')).toEqual([]);
      await expect(stat(join(r.root, 'echo/1'))).rejects.toThrow(/ENOENT/);
    }
  });
});

describe('an MLServer ServedModel from a modctl-pushed ModelPack artifact through the operator, on the real network', () => {
  /** The scikit-learn model: y = SLOPE * x. */
  const SLOPE = 2.5;
  const IRIS_WEIGHTS = randomBytes(6 * 1024 * 1024);
  let mlservers: ServerPair;
  let irisRef: string;
  /** Requests the registry saw before the iris ServedModel. */
  let irisPushed: number;

  beforeAll(async () => {
    const joblib = join(work, 'iris.joblib');
    await writeSklearnModel(joblib, SLOPE);
    irisRef = `${new URL(origin.url).host}/models/iris:v1`;
    await pushMLServerVersion(m, join(work, 'iris-src'), irisRef, {
      settings: JSON.stringify({
        name: 'iris',
        implementation: 'mlserver_sklearn.SKLearnModel',
        parameters: { uri: './model.joblib', version: 'v1' },
      }),
      model: { name: 'model.joblib', body: await readFile(joblib) },
      weights: IRIS_WEIGHTS,
    });
    irisPushed = origin.requests.length;
    mlservers = await fleet.addServers('mlserver', startMLServer);
  }, 600_000);

  it('is Ready 2/2: the agents joined the tasks of its file preheat, the data blob read from the registry once, MLServer infers on both', async () => {
    const manifest = await manifestOf('iris', 'v1');
    expect(manifest.layers.map((l) => [rawPath(l), l.mediaType.endsWith('.raw')]).sort()).toEqual([
      ['model-settings.json', true],
      ['model.joblib', true],
      ['weights.bin', true],
    ]);
    const blobURL = (digest: string) => `${origin.url}/v2/models/iris/blobs/${digest}`;
    const started = Date.now();
    await createSourceServedModel({
      modelName: 'iris',
      version: 'v1',
      ref: irisRef,
      driver: 'mlserver',
      agentPort: mlservers.agentPort,
    });
    await expectReady('iris', 'v1', { reference: irisRef, digest: manifest.digest, layers: 3 }, started);
    // The Triton case waited for its file preheat's SUCCESS; this one does not pay the manager's 30 s again.
    const byURL = await expectFilePreheat(
      'iris',
      manifest.layers.map((l) => blobURL(l.digest)),
      { started, succeeded: false },
    );
    for (const [i, r] of mlservers.replicas.entries()) {
      const dir = await expectPlaced(r, 'iris', 'v1', manifest, (l) => byURL.get(blobURL(l.digest)));
      expect((await readdir(dir)).sort()).toEqual(['model-settings.json', 'model.joblib', 'weights.bin']);
      expect(await servedVersions(r.server, 'iris')).toEqual(['v1']);
      const answer = await inferIris(r.server, 3);
      expect(answer.model_version, fleet.nodeOf(i)).toBe('v1');
      expect(answer.outputs[0]!.data[0], fleet.nodeOf(i)).toBeCloseTo(3 * SLOPE, 6);
    }
    const bytes = expectBlobReads(manifest.layers, irisPushed);
    console.log(`the registry served ${bytes} body bytes of iris's ${manifest.layers.length} blobs`);
  });

  it('deleting the ServedModel unloads the model on both replicas and lets the finalizer go', async () => {
    await deleteServedModel('iris');
    for (const r of mlservers.replicas) {
      expect(await servedVersions(r.server, 'iris')).toEqual([]);
      await expect(stat(join(r.root, 'iris/v1'))).rejects.toThrow(/ENOENT/);
    }
  });
});

/** One inference of the iris model on MLServer (input x); throws unless it answers 200. */
async function inferIris(
  server: OipServer,
  x: number,
): Promise<{ model_version: string; outputs: { data: number[] }[] }> {
  const res = await fetch(`${server.url}/v2/models/iris/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP64', shape: [1, 1], data: [x] }] }),
  });
  if (res.status !== 200) throw new Error(`iris inference: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as { model_version: string; outputs: { data: number[] }[] };
}
