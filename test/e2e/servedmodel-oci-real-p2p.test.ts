/**
 * A Triton ServedModel whose model is an OCI artifact (spec.source.oci) through the OPERATOR, on the REAL Dragonfly
 * network (manager and scheduler v2.5.1, dfdaemon 1.4.2: a seed peer and two node peers on their own 127.0.0.x
 * addresses), from the REAL registry (Distribution v3) behind a counting proxy. Real `modctl` pushes one version
 * of the echo model as a ModelPack artifact (a 6 MiB raw weights layer, a raw config layer, a tar code layer); two
 * real Triton 2.51.0 replicas, each with a real `peerload agent` beside it, listen on their node peer's address and
 * are found through the EndpointSlices of a Service, as in a cluster.
 *
 * The registry is anonymous, so the owned ModelPreheat is a `type: file` job of the layers' blob URLs (the real
 * manager's image preheat refuses to dial a loopback registry): it succeeds on the real manager, its status.tasks
 * are the task ids the agents' downloads got from their node's daemon, the weights blob crosses from the registry
 * once in all, every placed file hashes to its layer's digest and the tar layer is extracted. Ready 2/2, and
 * Triton answers with the artifact's code and config.
 */
import * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { startDragonfly, type Dragonfly } from '../support/dragonfly.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { modctl, pushTritonVersion } from '../support/modctl.ts';
import { blobReads, layerFilePath, pushedManifest, sha256, type Layer } from '../support/oci-blobs.ts';
import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { startTritonFleet, type TritonFleet } from '../support/triton-fleet.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';
import { startRegistry, type Registry } from '../support/registry.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';
const TOKEN = 'triton-oci-agent-token-0123456789';
const WEIGHTS = randomBytes(6 * 1024 * 1024);
const OFFSET = 3;
/** The minimum piece length of dfdaemon 1.4.2: content up to it is fetched by each peer from the origin itself. */
const MIN_PIECE = 4 * 1024 * 1024;

let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let core: k8s.CoreV1Api;
let ns: string;
let work: string;
let network: Dragonfly;
let fleet: TritonFleet;
let registry: Registry;
let origin: CountingProxy;
let jwt: string;
/** The artifact's reference, through the counting proxy: every blob read the registry serves is counted. */
let reference: string;
/** Requests the registry saw before the ServedModel (modctl's push). */
let pushed: number;

beforeAll(async () => {
  kc = kubeConfig(inject('kubeconfigPath'));
  custom = kc.makeApiClient(k8s.CustomObjectsApi);
  core = kc.makeApiClient(k8s.CoreV1Api);
  ns = await createNamespace(kc, 'triton-oci');
  work = await mkdtemp(join(tmpdir(), 'peerload-triton-oci-'));

  network = await startDragonfly({ nodePeers: 2, deferPreheatable: true });
  jwt = await network.signIn();
  registry = await startRegistry();
  origin = await startCountingProxy(registry.url);
  reference = `${new URL(origin.url).host}/models/echo:v1`;
  const m = await modctl(join(work, 'modctl'));
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
    flags: ['--allowed-registry-hosts', '127.0.0.1'],
  });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await fleet?.stop();
  await origin?.close();
  await registry?.stop();
  await network?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

const get = <T>(plural: string, name: string) =>
  custom.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: ns,
    plural,
    name,
  }) as Promise<T>;

/** Where the agent reports a layer: a raw layer as its file path, a tar layer as its blob. */
const placedPath = (l: Layer) =>
  l.mediaType.endsWith('.raw') ? layerFilePath(l) : `sha256-${l.digest.slice('sha256:'.length)}`;

/** The manager's own record of a job. */
async function managerJob(id: number): Promise<{ state: string; args: { type?: string; urls?: string[] } }> {
  const res = await fetch(`${network.managerURL}/api/v1/jobs/${id}`, {
    headers: { authorization: `Bearer ${jwt}` },
  });
  return (await res.json()) as { state: string; args: { type?: string; urls?: string[] } };
}

describe('a Triton ServedModel from a modctl-pushed ModelPack artifact through the operator, on the real network', () => {
  it('is Ready 2/2: the layers preheated as files on the real manager, the agents joined those tasks, the weights blob read from the registry once', async () => {
    const manifest = await pushedManifest(registry.url, 'models/echo', 'v1');
    const blobURL = (digest: string) => `${origin.url}/v2/models/echo/blobs/${digest}`;
    const started = Date.now();
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: 'servedmodels',
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'ServedModel',
        metadata: { name: 'echo' },
        spec: {
          modelName: 'echo',
          version: '1',
          source: { oci: { reference, plainHTTP: true } },
          modelServer: {
            driver: 'triton',
            service: { name: 'triton' },
            agent: { port: fleet.agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
          },
          preheat: {
            create: true,
            manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
          },
        },
      },
    });
    const sm = (await waitFor(
      'echo Ready 2/2 at version 1',
      async () => {
        const o = await get<ServedModel>('servedmodels', 'echo');
        const ready = o.status?.conditions?.find((c) => c.type === 'Ready');
        return o.status?.ready === '2/2' &&
          o.status.observedGeneration === o.metadata.generation &&
          ready?.status === 'True' &&
          o.status.replicas?.every((r) => r.version === '1')
          ? o
          : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 1000 },
    ))!;
    console.log(`Ready 2/2 after ${Date.now() - started} ms: ${JSON.stringify(sm.status?.replicas)}`);
    expect(sm.status!.source).toMatchObject({
      oci: { reference, digest: manifest.digest },
      layers: 3,
    });
    expect(
      sm.status!.replicas!.map((r) => [r.node, r.nodeIP, r.phase, r.registered]).sort(),
      JSON.stringify(sm.status?.replicas),
    ).toEqual(network.peers.map((p, i) => [fleet.nodeOf(i), p.ip, 'Ready', true]).sort());

    // The owned preheat: a file job of the three layers' blob URLs, SUCCESS on the real manager.
    const layerURLs = manifest.layers.map((l) => blobURL(l.digest));
    const preheat = (await waitFor(
      'echo-preheat SUCCESS',
      async () => {
        const o = await get<ModelPreheat>('modelpreheats', 'echo-preheat');
        return o.status?.state === 'SUCCESS' ? o : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 1000 },
    ))!;
    console.log(`echo-preheat SUCCESS after ${Date.now() - started} ms`);
    expect(preheat.spec).toMatchObject({ type: 'file' });
    expect([...(preheat.spec.urls ?? [])].sort()).toEqual([...layerURLs].sort());
    expect(preheat.status?.conditions?.find((c) => c.type === 'Succeeded')?.status).toBe('True');
    expect(preheat.status?.jobID).toBeGreaterThan(0);
    const job = await managerJob(preheat.status!.jobID!);
    expect(job.state).toBe('SUCCESS');
    expect(job.args.type).toBe('file');
    expect([...(job.args.urls ?? [])].sort()).toEqual([...layerURLs].sort());
    // status.tasks: each blob URL's task id as the daemon computes it, and exactly what each agent's download got
    // from its node's daemon (X-Dragonfly-Task-ID): the placements joined the preheat's tasks.
    const tasks = preheat.status!.tasks!;
    expect([...tasks].sort((a, b) => a.url.localeCompare(b.url))).toEqual(
      [...layerURLs].sort().map((url) => ({ url, taskID: taskID({ url }) })),
    );
    const byURL = new Map(tasks.map((t) => [t.url, t.taskID]));

    for (const [i, r] of fleet.replicas.entries()) {
      const placed = r.agent.versions.get('echo')?.get('1');
      expect(placed?.state, r.peer.name).toBe('Ready');
      console.log(`${r.peer.name} placed ${JSON.stringify(placed!.files)}`);
      expect(placed!.files.map((f) => [f.path, f.taskID]).sort(), r.peer.name).toEqual(
        manifest.layers.map((l) => [placedPath(l), byURL.get(blobURL(l.digest))]).sort(),
      );
      // The tar layer: one file extracted (model.py); the raw layers are files of their own.
      const tars = manifest.layers.filter((l) => /\.tar$/.test(l.mediaType));
      expect(tars).toHaveLength(1);
      expect(placed!.files.filter((f) => f.path.startsWith('sha256-')).map((f) => f.extracted)).toEqual([1]);

      const dir = join(r.root, 'echo', '1');
      // Triton's Python backend writes __pycache__ beside model.py once it loads it.
      expect((await readdir(dir)).filter((n) => n !== '__pycache__').sort()).toEqual([
        'model.py',
        'offset.json',
        'weights.bin',
      ]);
      // Every raw layer's placed file hashes to the layer's digest in the manifest; the tar layer's file is the code.
      for (const l of manifest.layers.filter((x) => x.mediaType.endsWith('.raw'))) {
        const path = layerFilePath(l);
        expect(sha256(await readFile(join(dir, path!))), `${r.peer.name} ${path}`).toBe(l.digest);
      }
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

    // What the registry served per blob since the push, preheat and placements together. A blob above the
    // minimum piece length crossed once (the seed peer's back-to-source), plus a 1-byte range probe from each
    // peer that started a download of it (the seed peer, each node peer for its preheat and maybe once more for
    // its agent's download racing the preheat's probe: 5 at most). A blob up to it never travels between peers
    // (dfdaemon 1.4.2 serves such content from the origin to each peer that asks), so it may cross once per peer
    // that downloads it: the seed peer and the two node peers.
    const reads = blobReads(origin, pushed);
    console.log(`registry blob reads since the push: ${JSON.stringify(reads)}`);
    for (const l of manifest.layers) {
      const r = reads[l.digest]!;
      expect(r.data, `${l.digest}: ${r.gets.join(', ')}`).toBeGreaterThanOrEqual(l.size);
      expect(r.probes, `${l.digest}: ${r.gets.join(', ')}`).toBeLessThanOrEqual(5);
      if (l.size > MIN_PIECE) expect(r.data, `${l.digest} read once: ${r.gets.join(', ')}`).toBe(l.size);
      else expect(r.data, `${l.digest}: ${r.gets.join(', ')}`).toBeLessThanOrEqual(3 * l.size);
    }
    expect(manifest.layers.some((l) => l.size > MIN_PIECE)).toBe(true);
  });

  it('deleting the ServedModel unloads the model on both replicas and lets the finalizer go', async () => {
    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: 'servedmodels',
      name: 'echo',
    });
    await waitFor(
      'echo gone',
      () =>
        get<ServedModel>('servedmodels', 'echo').then(
          () => false,
          () => true,
        ),
      { timeoutMs: 180_000, intervalMs: 1000 },
    );
    for (const r of fleet.replicas) {
      expect(await servedVersions(r.server, 'echo')).toEqual([]);
      await expect(stat(join(r.root, 'echo/1'))).rejects.toThrow(/ENOENT/);
    }
  });
});
