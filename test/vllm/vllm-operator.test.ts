/**
 * vLLM (CPU) through the OPERATOR: ServedModels of driver `vllm` on the REAL Dragonfly network, with the operator's
 * ServedModel and ModelPreheat controllers in process against the real kube-apiserver + etcd. Two vLLM replicas on
 * one node (test/support/vllm-node.ts), each with its own `peerload agent` and model root, which its vLLM sees at
 * one path in a mount namespace of its own, as a pod's container sees its volume (the spec's `agent.root`); a
 * Service's EndpointSlices name both replicas on that node, whose InternalIP is the node peer's address.
 *   - a ServedModel of the base model: each replica Ready from /health and /v1/models with nothing registered, and
 *     the local hit of each replica's `peerload fetch` in status;
 *   - a ServedModel per adapter: the operator preheats the node's peer, each agent places the adapter through it
 *     (one origin read per file, the preheat's and the downloads' together), the driver loads it on both replicas;
 *     a completion through each replica with each;
 *   - a version change reloads in place (the adapter never leaves /v1/models), status says the new version, the old
 *     directory goes; a restarted replica gets its adapters again without a download; deletion unloads them and
 *     lets the finalizer go, and the base model stays;
 *   - an adapter from an OCI ModelPack artifact (`spec.source.oci`): real `modctl` pushes the suite's adapter files
 *     to the real registry (Distribution v3) behind a counting proxy; the operator preheats the node's peer with
 *     the layers' blob URLs, each agent places the layers through it, the driver loads the adapter on both replicas
 *     (its completion the same adapter's from the bucket), and deletion unloads it.
 * Opt-in (`npm run test:vllm`).
 */
import * as k8s from '@kubernetes/client-node';
import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import type { ModelFiles } from '../../src/servers/driver.ts';
import { ROOT_USER } from '../support/dragonfly.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { modctl, pushLoraAdapter } from '../support/modctl.ts';
import { blobReads, layerFilePath, pushedManifest, sha256 } from '../support/oci-blobs.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { startVllm } from '../support/vllm.ts';
import {
  AGENT_TOKEN,
  API_KEY,
  BASE_NAME,
  BASE_VERSION,
  BUCKET,
  complete,
  expectOneOriginRead,
  models,
  startVllmNode,
  type VllmNode,
} from '../support/vllm-node.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';
const SERVICE = 'vllm';

let node: VllmNode;
let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let core: k8s.CoreV1Api;
let ns: string;
let nodeName: string;
let svc: ServiceEndpoints;
let operator: RunningManager;
/** Each adapter's greedy completion once loaded (the same on every replica). */
const texts: Record<string, string> = {};
/** The greedy completion of adapter-a-v1 (sql v1 from the bucket), before sql moves to v2. */
let sqlV1 = '';
/** The real registry and the counting proxy in front of it (started by the OCI test). */
let registry: Registry | undefined;
let registryProxy: CountingProxy | undefined;
/** The minimum piece length of dfdaemon 1.4.2: content up to it is fetched by each peer from the origin itself. */
const MIN_PIECE = 4 * 1024 * 1024;

const pod = (i: number) => `vllm-${i}`;

beforeAll(async () => {
  node = await startVllmNode({ mounted: true });
  kc = kubeConfig(inject('kubeconfigPath'));
  custom = kc.makeApiClient(k8s.CustomObjectsApi);
  core = kc.makeApiClient(k8s.CoreV1Api);
  ns = await createNamespace(kc, 'vllm-sm');
  nodeName = `${ns}-node`;
  await ServiceEndpoints.createNode(kc, nodeName, node.peer.ip);
  const secrets: Record<string, Record<string, string>> = {
    's3-credentials': { access_key: node.minio.accessKey, secret_key: node.minio.secretKey },
    'manager-user': { username: ROOT_USER.name, password: ROOT_USER.password },
    'agent-token': { token: AGENT_TOKEN },
    'vllm-api-key': { key: API_KEY },
  };
  for (const [name, stringData] of Object.entries(secrets))
    await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name }, stringData } });
  // Each replica's slice address leads to its own loopback address: its vLLM, and its agent at the common port.
  svc = new ServiceEndpoints(kc, ns, SERVICE);
  const hosts = new Map<string, string>();
  for (const [i, r] of node.replicas.entries())
    hosts.set((await svc.add(pod(i), r.vllm.url, true, nodeName)).address, r.ip);
  operator = await startManager(
    kc,
    [
      '--no-leader-elect',
      ...['--manager-url', node.network.managerURL, '--allowed-manager-hosts', '127.0.0.1'],
      ...['--poll-backoff-start', '1s', '--poll-backoff-max', '5s'],
      ...['--allowed-registry-hosts', 'http://127.0.0.1'],
    ],
    [
      modelPreheatController,
      (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher(hosts) }),
    ],
  );
}, 3_600_000);

afterAll(async () => {
  await operator?.stop();
  await registryProxy?.close();
  await registry?.stop();
  if (nodeName) await core.deleteNode({ name: nodeName }).catch(() => undefined);
  await node?.stop();
}, 120_000);

/** A ServedModel of driver vllm on the Service's replicas: `prefix` is the model's directory in the bucket. */
function servedModel(name: string, version: string, prefix: string) {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'ServedModel',
    metadata: { name },
    spec: {
      modelName: name,
      version,
      files: { prefix },
      modelServer: {
        driver: 'vllm',
        service: { name: SERVICE },
        managementTokenSecretRef: { name: 'vllm-api-key', key: 'key' },
        // Every replica's vLLM sees its own root at this one path, as pods mount their volume.
        agent: {
          port: node.agentPort,
          tokenSecretRef: { name: 'agent-token', key: 'token' },
          root: node.modelsPath(node.replicas[0]!),
        },
      },
      preheat: {
        create: true,
        objectStorage: {
          ...node.minio.location(BUCKET),
          endpoint: node.origin.url,
          credentialsSecretRef: { name: 's3-credentials' },
        },
        manager: { url: node.network.managerURL, signInSecretRef: { name: 'manager-user' } },
      },
    },
  };
}

/** A ServedModel of driver vllm whose adapter is the ModelPack artifact `reference` (plain HTTP, anonymous). */
function ociServedModel(name: string, version: string, reference: string) {
  const { files: _files, preheat, ...spec } = servedModel(name, version, '').spec;
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: 'ServedModel',
    metadata: { name },
    spec: {
      ...spec,
      source: { oci: { reference, plainHTTP: true } },
      // No objectStorage: the source says where the bytes are. Node-targeted, as the adapters from the bucket.
      preheat: { create: true, manager: preheat.manager },
    },
  };
}

const ref = (name: string) => ({
  group: GROUP,
  version: VERSION,
  namespace: ns,
  plural: 'servedmodels',
  name,
});
const get = async (name: string) => (await custom.getNamespacedCustomObject(ref(name))) as ServedModel;
const create = (body: ReturnType<typeof servedModel> | ReturnType<typeof ociServedModel>) =>
  custom.createNamespacedCustomObject({ ...ref(body.metadata.name), body });
const upload = (fixture: string, prefix: string) => node.upload(join(node.setup.fixtures, fixture), prefix);

/** The ServedModel once this generation is Ready on both replicas at `version` (its status in the error if not). */
async function settled(name: string, version: string, timeoutMs = 420_000): Promise<ServedModel> {
  let last: ServedModel | undefined;
  try {
    return await waitFor(
      `${name} ${version} Ready 2/2`,
      async () => {
        const o = (last = await get(name));
        const s = o.status;
        const current =
          s?.observedGeneration === o.metadata.generation &&
          s?.ready === '2/2' &&
          s.conditions?.find((c) => c.type === 'Ready')?.status === 'True' &&
          s.replicas?.every((r) => r.version === version);
        return current ? o : undefined;
      },
      { timeoutMs, intervalMs: 1000 },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last status: ${JSON.stringify(last?.status)}`, {
      cause: err,
    });
  }
}

/** The replicas' statuses by pod, as a person reads them. */
function byPod(sm: ServedModel) {
  return Object.fromEntries(
    (sm.status?.replicas ?? []).map((r) => [
      r.pod,
      { version: r.version, ready: r.ready, phase: r.phase, nodeIP: r.nodeIP, localHit: r.localHit },
    ]),
  );
}

/** An adapter's replica once `version` is loaded: on the node's peer, its download's local hit said either way. */
const adapterReplica = (version: string) => ({
  version,
  ready: true,
  phase: 'Ready',
  nodeIP: node.peer.ip,
  localHit: expect.any(Boolean),
});

async function events(name: string): Promise<{ reason: string; note: string }[]> {
  const list = await core.listNamespacedEvent({
    namespace: ns,
    fieldSelector: `involvedObject.name=${name}`,
  });
  return list.items.map((e) => ({ reason: e.reason ?? '', note: e.message ?? '' }));
}

/** The notes of `name`'s Events of `reason` once `count` of them match `pattern` (Events are written apart). */
async function notes(name: string, reason: string, pattern: RegExp, count: number): Promise<string[]> {
  const matching = async () =>
    (await events(name)).filter((e) => e.reason === reason && pattern.test(e.note)).map((e) => e.note);
  try {
    return await waitFor(`${count} ${reason} Events of ${name}`, async () => {
      const found = await matching();
      return found.length >= count ? found : undefined;
    });
  } catch {
    return matching();
  }
}

/** Bytes the origin served of the keys under `prefix`. */
const servedUnder = (prefix: string) =>
  Object.entries(node.originBytes()).filter(([key]) => key.startsWith(prefix));

async function gone(name: string): Promise<void> {
  await waitFor(
    `${name} deleted (finalizer gone)`,
    () =>
      get(name).then(
        () => false,
        () => true,
      ),
    { timeoutMs: 180_000, intervalMs: 1000 },
  );
}

const adapterIds = async (i: number) =>
  (await models(node.replicas[i]!))
    .map((m) => m.id)
    .filter((id) => id !== BASE_NAME)
    .sort();

describe('vLLM through ServedModels of the operator', () => {
  it('a ServedModel of the base model: Ready 2/2 from /health and /v1/models, with the local hits of the fetch', async () => {
    expect(node.replicas[1]!.fetchLine).toContain(`(${node.base.files.length} local hits`);
    await create(servedModel(BASE_NAME, BASE_VERSION, `base/${BASE_VERSION}/`));
    const sm = await settled(BASE_NAME, BASE_VERSION);
    expect(sm.status!.servedVersion).toBe(BASE_VERSION);
    // The first replica's fetch went to the origin through the node's peer, the second's was the peer's copy.
    const replica = { version: BASE_VERSION, ready: true, phase: 'Ready', nodeIP: node.peer.ip };
    expect(byPod(sm)).toEqual({
      [pod(0)]: { ...replica, localHit: false },
      [pod(1)]: { ...replica, localHit: true },
    });
    // Nothing to register: no load, no registration Event; vLLM serves the base model alone.
    expect((await events(BASE_NAME)).map((e) => e.reason)).not.toContain('ModelRegistered');
    for (const r of node.replicas)
      expect((await models(r)).map((m) => [m.id, m.parent])).toEqual([[BASE_NAME, null]]);
  });

  it('two adapters, each its own ServedModel: loaded on both replicas from one origin read per file', async () => {
    const files: Record<string, ModelFiles> = {
      sql: await upload('adapter-a-v1', 'sm/sql/v1'),
      chat: await upload('adapter-b-v1', 'sm/chat/v1'),
    };
    await create(servedModel('sql', 'v1', 'sm/sql/v1/'));
    await create(servedModel('chat', 'v1', 'sm/chat/v1/'));
    for (const name of ['sql', 'chat']) {
      const sm = await settled(name, 'v1');
      // The agents download through the node's peer once its preheat job exists: a download that joins the
      // preheat's running task is not a local hit, one after it is; status says which, for every replica.
      const replica = adapterReplica('v1');
      expect(byPod(sm), JSON.stringify(sm.status)).toEqual({ [pod(0)]: replica, [pod(1)]: replica });
      expect(sm.status!.files).toMatchObject({ count: files[name]!.files.length });
      // Every file crossed from the origin once (preheat and downloads together), plus a 1-byte probe per download.
      expectOneOriginRead(node, files[name]!, 3);
      for (const [i, r] of node.replicas.entries()) {
        // Each replica loaded its own agent's copy, from where its vLLM sees its root.
        expect((await stat(join(r.root, name, 'v1', 'adapter_model.safetensors'))).size).toBeGreaterThan(0);
        const card = (await models(r)).find((m) => m.id === name);
        expect(card, pod(i)).toMatchObject({ root: join(node.modelsPath(r), name, 'v1'), parent: BASE_NAME });
        const out = await complete(r, name);
        expect(out.status).toBe(200);
        // One adapter, one greedy completion: the same through both replicas.
        if (i === 0) texts[name] = out.text;
        else expect(out.text).toBe(texts[name]);
      }
      const how = /\((peer cache hit|downloaded through the peer)\)$/;
      expect(await notes(name, 'ModelRegistered', how, 2)).toHaveLength(2);
    }
    // Two adapters beside each other, neither the base model.
    expect(texts['sql']).not.toBe(texts['chat']);
    expect((await complete(node.replicas[0]!, BASE_NAME)).text).not.toBe(texts['sql']);
    for (const i of [0, 1]) expect(await adapterIds(i)).toEqual(['chat', 'sql']);
  });

  it('a version change reloads the adapter in place on both replicas; status says the new version', async () => {
    const v2 = await upload('adapter-a-v2', 'sm/sql/v2');
    // Meanwhile /v1/models is read on both replicas: the adapter must never be missing (load_inplace).
    let polls = 0;
    const missing: string[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        for (const i of [0, 1])
          if (!(await adapterIds(i)).includes('sql')) missing.push(`${pod(i)} #${polls}`);
        polls++;
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    await custom.patchNamespacedCustomObject(
      { ...ref('sql'), body: { spec: { version: 'v2', files: { prefix: 'sm/sql/v2/' } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    let sm: ServedModel;
    try {
      sm = await settled('sql', 'v2');
    } finally {
      polling = false;
      await poller;
    }
    expect(sm.status!.servedVersion).toBe('v2');
    expect(polls).toBeGreaterThan(0);
    expect(missing).toEqual([]);
    const replica = adapterReplica('v2');
    expect(byPod(sm)).toEqual({ [pod(0)]: replica, [pod(1)]: replica });
    expectOneOriginRead(node, v2, 3);
    const after: string[] = [];
    for (const r of node.replicas) {
      const card = (await models(r)).find((m) => m.id === 'sql');
      expect(card).toMatchObject({ root: join(node.modelsPath(r), 'sql', 'v2') });
      const out = await complete(r, 'sql');
      expect(out.status).toBe(200);
      after.push(out.text);
      // The old version's directory went once the new one served.
      await waitFor(
        'the old directory removed',
        async () => (await readdir(join(r.root, 'sql'))).join() === 'v2',
        {
          timeoutMs: 30_000,
        },
      );
    }
    expect(after[1]).toBe(after[0]);
    expect(after[0]).not.toBe(texts['sql']);
    sqlV1 = texts['sql']!;
    texts['sql'] = after[0]!;
    expect(await notes('sql', 'VersionRemoved', /^unregistered sql v1 from/, 2)).toHaveLength(2);
  });

  it('a restarted replica gets its adapters loaded again, from the directories its agent kept', async () => {
    const r = node.replicas[1]!;
    const before = servedUnder('sm/');
    // What the kubelet does while the container restarts: the endpoint is not ready, then ready again.
    await svc.setReady(pod(1), false);
    await r.vllm.stop();
    r.vllm = await startVllm(r.vllmOptions);
    expect(await adapterIds(1)).toEqual([]);
    await svc.setReady(pod(1), true);
    await waitFor('both adapters loaded again', async () => (await adapterIds(1)).join() === 'chat,sql', {
      timeoutMs: 300_000,
      intervalMs: 1000,
    });
    await settled('sql', 'v2');
    await settled('chat', 'v1');
    for (const name of ['sql', 'chat'])
      expect(await complete(r, name)).toEqual({ status: 200, text: texts[name] });
    // Nothing downloaded again: the origin served no more bytes of any adapter's file.
    expect(servedUnder('sm/')).toEqual(before);
  });

  it('deleting an adapter unloads it on both replicas and lets the finalizer go; the base model stays', async () => {
    await custom.deleteNamespacedCustomObject(ref('sql'));
    await gone('sql');
    for (const [i, r] of node.replicas.entries()) {
      expect(await adapterIds(i)).toEqual(['chat']);
      expect((await complete(r, 'sql')).status).toBe(404);
      expect(await readdir(join(r.root, 'sql'))).toEqual([]);
      expect(await complete(r, 'chat')).toEqual({ status: 200, text: texts['chat'] });
    }
    await custom.deleteNamespacedCustomObject(ref('chat'));
    await custom.deleteNamespacedCustomObject(ref(BASE_NAME));
    await gone('chat');
    await gone(BASE_NAME);
    for (const [i, r] of node.replicas.entries()) {
      expect(await adapterIds(i)).toEqual([]);
      expect((await complete(r, BASE_NAME)).status).toBe(200);
    }
  });
  it('an adapter from a modctl-pushed OCI artifact: loaded on both replicas, each blob read from the registry once, unloaded on deletion', async () => {
    registry = await startRegistry();
    const proxy = (registryProxy = await startCountingProxy(registry.url));
    const reference = `${new URL(proxy.url).host}/adapters/sql:v1`;
    const m = await modctl(join(node.work, 'modctl'));
    await pushLoraAdapter(
      m,
      join(node.setup.fixtures, 'adapter-a-v1'),
      join(node.work, 'oci-adapter'),
      reference,
    );
    const pushed = proxy.requests.length;
    const manifest = await pushedManifest(registry.url, 'adapters/sql', 'v1');
    expect(manifest.layers.map(layerFilePath).sort()).toEqual([
      'adapter_config.json',
      'adapter_model.safetensors',
    ]);

    const name = 'sql-oci';
    await create(ociServedModel(name, 'v1', reference));
    const sm = await settled(name, 'v1');
    expect(sm.status!.source).toMatchObject({ oci: { reference, digest: manifest.digest }, layers: 2 });
    const replica = adapterReplica('v1');
    expect(byPod(sm), JSON.stringify(sm.status)).toEqual({ [pod(0)]: replica, [pod(1)]: replica });
    for (const [i, r] of node.replicas.entries()) {
      // Each agent placed the layers at the version directory's root, every file its layer's digest.
      const dir = join(r.root, name, 'v1');
      expect((await readdir(dir)).sort(), pod(i)).toEqual([
        'adapter_config.json',
        'adapter_model.safetensors',
      ]);
      for (const l of manifest.layers)
        expect(sha256(await readFile(join(dir, layerFilePath(l)!))), `${pod(i)} ${layerFilePath(l)}`).toBe(
          l.digest,
        );
      const card = (await models(r)).find((c) => c.id === name);
      expect(card, pod(i)).toMatchObject({ root: join(node.modelsPath(r), name, 'v1'), parent: BASE_NAME });
      // The same adapter as sql v1 from the bucket: the same greedy completion.
      expect(await complete(r, name), pod(i)).toEqual({ status: 200, text: sqlV1 });
      expect(await adapterIds(i)).toContain(name);
    }
    expect(sqlV1).not.toBe('');

    // The owned preheat targets the node's peer (as the adapters from the bucket): the layers' blob URLs as files.
    const blobURL = (digest: string) => `${proxy.url}/v2/adapters/sql/blobs/${digest}`;
    const preheat = await waitFor(
      `${name}-preheat SUCCESS`,
      async () => {
        const o = (await custom.getNamespacedCustomObject({
          ...ref(`${name}-preheat`),
          plural: 'modelpreheats',
        })) as ModelPreheat;
        return o.status?.state === 'SUCCESS' ? o : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 1000 },
    );
    expect(preheat.spec).toMatchObject({
      type: 'file',
      scope: 'all_peers',
      targets: { ips: [node.peer.ip] },
    });
    expect([...(preheat.spec.urls ?? [])].sort()).toEqual(
      manifest.layers.map((l) => blobURL(l.digest)).sort(),
    );

    // What the registry served per blob since the push, preheat and placements together. Both layers are below
    // dfdaemon's minimum piece length (4 MiB), content that never travels between peers (dfdaemon 1.4.2 serves it
    // from the origin to each peer that asks), so with more nodes each would cross once per node; here the one
    // node's peer, the only one preheated, fetched each once and served both agents' downloads: one read per blob,
    // plus at most a 1-byte range probe per download through the peer (the preheat's and each agent's).
    const reads = blobReads(proxy, pushed);
    console.log(`registry blob reads since the push: ${JSON.stringify(reads)}`);
    for (const l of manifest.layers) {
      const r = reads[l.digest];
      expect(r, `${l.digest} never read`).toBeDefined();
      expect(l.size).toBeLessThanOrEqual(MIN_PIECE);
      expect(r!.data, `${l.digest} read once: ${r!.gets.join(', ')}`).toBe(l.size);
      expect(r!.probes, `${l.digest}: ${r!.gets.join(', ')}`).toBeLessThanOrEqual(3);
    }

    await custom.deleteNamespacedCustomObject(ref(name));
    await gone(name);
    for (const [i, r] of node.replicas.entries()) {
      expect(await adapterIds(i)).not.toContain(name);
      expect((await complete(r, name)).status).toBe(404);
      expect(await readdir(join(r.root, name))).toEqual([]);
    }
  });
});
