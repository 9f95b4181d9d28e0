/**
 * The confused deputy, refused: in one namespace, resources point the operator at an HTTP listener that records
 * EVERY request it receives, naming Secrets of the namespace (a manager token, a sign-in user, object-storage keys,
 * registry credentials, a model-server management key) and a ClusterManager made for another namespace. With the
 * operator's default policy (no --allowed-*-hosts), the listener receives nothing at all, so none of the planted
 * Secret values, and every object is Stalled with the reason of the rule that refused it. A ClusterManager the admin
 * made for the namespace is used, with its token from the operator's namespace (the positive control: the same kind
 * of listener records that request). Deleting the refused objects contacts nobody either, and none of the planted
 * values is in the operator's log. The operator is `peerload operator` in a process of its own, as a cluster runs it.
 *
 * With the manager allowed, object-storage endpoints (keys and prefixes of s3, gcs, abs and oss), an image registry
 * with credentials, a ServedModel directory and a Hugging Face source with a token at the listener are refused too, before the Secret is read: no
 * request, and no job on the admin's manager (whose seed peer would fetch the signed URLs). Last, the same objects
 * against an operator whose four lists admit the listener: it receives the planted values, so the refusals are what
 * kept them.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { startOperatorProcess, type OperatorProcess } from '../support/operator-process.ts';
import type { Condition } from '../../src/api/index.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';

interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** An HTTP server that records every request (answering 200 `{}`: whatever the operator would make of it). */
async function recordingListener(): Promise<{ url: string; requests: Recorded[]; close(): Promise<void> }> {
  const requests: Recorded[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

const planted = (what: string) => `planted-${what}-${randomBytes(12).toString('hex')}`;
const SECRETS = {
  pat: { token: planted('pat') },
  user: { username: planted('username'), password: planted('password') },
  store: {
    access_key: planted('access-key'),
    secret_key: planted('secret-key'),
    session_token: planted('session'),
  },
  registry: { username: planted('registry-user'), password: planted('registry-password') },
  ts: { key: planted('management-key') },
  agent: { token: planted('agent-token') },
  vllm: { key: planted('vllm-api-key') },
  hf: { token: planted('hf-token') },
  oss: { access_key_id: planted('oss-key-id'), access_key_secret: planted('oss-key-secret') },
  abs: { account_key: Buffer.from(planted('abs-account-key')).toString('base64') },
  gcs: {
    'service_account.json': JSON.stringify({
      type: 'service_account',
      client_email: `${planted('gcs')}@p.iam.gserviceaccount.com`,
      private_key: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({
        type: 'pkcs8',
        format: 'pem',
      }),
    }),
  },
};
/** The parts of the gcs key that a request could carry (the service account's name and its private key). */
const GCS_VALUES = (() => {
  const sa = JSON.parse(SECRETS.gcs['service_account.json']) as { client_email: string; private_key: string };
  return [sa.client_email, sa.private_key.split('\n')[1]!];
})();
/** Every planted value: none may reach the tenant's listener, in any encoding. */
const PLANTED = [
  ...Object.entries(SECRETS).flatMap(([name, s]) => (name === 'gcs' ? [] : Object.values(s))),
  ...GCS_VALUES,
];
const CLUSTER_MANAGER_TOKEN = planted('cluster-manager-token');
const DEFAULT_TOKEN = planted('default-token');

const forms = (v: string) => [v, encodeURIComponent(v), Buffer.from(v).toString('base64'), JSON.stringify(v)];
/** Basic credentials decoded: `user:password` in base64 holds neither value's own base64 form. */
const basic = (r: Recorded) => {
  const auth = String(r.headers.authorization ?? '');
  return auth.startsWith('Basic ') ? Buffer.from(auth.slice(6), 'base64').toString('utf8') : '';
};
const leaked = (requests: Recorded[], values: string[]) =>
  requests.flatMap((r) => {
    const text = `${r.method} ${r.url}\n${JSON.stringify(r.headers)}\n${basic(r)}\n${r.body}`;
    return values.filter((v) => forms(v).some((f) => text.includes(f)));
  });

let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let core: k8s.CoreV1Api;
let ns: string;
let opNs: string;
let tenant: Awaited<ReturnType<typeof recordingListener>>;
let admins: Awaited<ReturnType<typeof recordingListener>>;
let defaultManager: Awaited<ReturnType<typeof recordingListener>>;
let operator: OperatorProcess;
const clusterManagers: string[] = [];

async function secret(namespace: string, name: string, data: Record<string, string>): Promise<void> {
  await core.createNamespacedSecret({ namespace, body: { metadata: { name }, stringData: data } });
}

async function clusterManager(name: string, spec: Record<string, unknown>): Promise<void> {
  await custom.createClusterCustomObject({
    group: GROUP,
    version: VERSION,
    plural: 'clustermanagers',
    body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'ClusterManager', metadata: { name }, spec },
  });
  clusterManagers.push(name);
}

const PLURAL = { ModelPreheat: 'modelpreheats', ServedModel: 'servedmodels' } as const;
type Kind = keyof typeof PLURAL;

async function create(
  kind: Kind,
  name: string,
  spec: Record<string, unknown>,
  namespace = ns,
): Promise<void> {
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURAL[kind],
    body: { apiVersion: `${GROUP}/${VERSION}`, kind, metadata: { name }, spec },
  });
}

async function get(kind: Kind, name: string, namespace = ns) {
  return (await custom.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURAL[kind],
    name,
  })) as {
    metadata: { generation?: number };
    status?: { conditions?: Condition[]; phase?: string; state?: string; tasks?: { taskID: string }[] };
  };
}

/** Waits until the object is Stalled=True for its generation and returns that condition. */
async function stalled(kind: Kind, name: string): Promise<Condition> {
  return waitFor(
    `${kind} ${name} Stalled`,
    async () => {
      const o = await get(kind, name);
      const c = o.status?.conditions?.find((x) => x.type === 'Stalled');
      return c?.status === 'True' && c.observedGeneration === o.metadata.generation ? c : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
}

interface Case {
  kind: Kind;
  name: string;
  spec: Record<string, unknown>;
  reason: string;
  field: string;
}

/**
 * The paths of the first round: a manager URL with a token or a sign-in user, a ClusterManager made for another
 * namespace or none, a model server's management key, an agent's token and vLLM's API key at static endpoints.
 */
function managerAndEndpointCases(origin: string): Case[] {
  return [
    {
      kind: 'ModelPreheat',
      name: 'pat',
      spec: {
        url: origin,
        manager: { url: tenant.url, apiPath: '/oapi/v1', tokenSecretRef: { name: 'pat', key: 'token' } },
      },
      reason: 'ManagerNotAllowed',
      field: 'spec.manager.url',
    },
    {
      kind: 'ModelPreheat',
      name: 'signin',
      spec: { url: origin, manager: { url: tenant.url, signInSecretRef: { name: 'user' } } },
      reason: 'ManagerNotAllowed',
      field: 'spec.manager.url',
    },
    {
      kind: 'ModelPreheat',
      name: 'storage',
      spec: {
        objectStorage: {
          type: 's3',
          bucket: 'models',
          endpoint: tenant.url,
          pathStyle: true,
          credentialsSecretRef: { name: 'store' },
          keys: ['m.mar'],
        },
        manager: { url: tenant.url },
        // Its finalizer's deletion path is exercised below: it must not contact the manager either.
        evictOnDelete: true,
        deleteJobOnCleanup: true,
      },
      reason: 'ManagerNotAllowed',
      field: 'spec.manager.url',
    },
    imagePreheat('image', { url: tenant.url }, 'ManagerNotAllowed', 'spec.manager.url'),
    {
      kind: 'ModelPreheat',
      name: 'not-my-cluster-manager',
      spec: { url: origin, manager: { clusterManagerRef: { name: `${ns}-other-team` } } },
      reason: 'ClusterManagerNotAllowed',
      field: 'spec.manager.clusterManagerRef',
    },
    {
      kind: 'ModelPreheat',
      name: 'no-such-cluster-manager',
      spec: { url: origin, manager: { clusterManagerRef: { name: `${ns}-nope` } } },
      reason: 'ClusterManagerNotFound',
      field: 'spec.manager.clusterManagerRef',
    },
    {
      kind: 'ServedModel',
      name: 'static',
      spec: {
        modelName: 'm',
        fileName: 'm.mar',
        modelServer: { endpoints: [tenant.url], managementTokenSecretRef: { name: 'ts', key: 'key' } },
      },
      reason: 'EndpointNotAllowed',
      field: 'spec.modelServer.endpoints',
    },
    {
      kind: 'ServedModel',
      name: 'hub',
      spec: {
        modelName: 'm',
        source: {
          huggingface: { repo: 'org/m', endpoint: tenant.url, tokenSecretRef: { name: 'hf', key: 'token' } },
        },
        modelServer: {
          driver: 'triton',
          service: { name: 'triton' },
          agent: { port: 8090, tokenSecretRef: { name: 'agent', key: 'token' } },
        },
      },
      reason: 'HubNotAllowed',
      field: 'spec.source.huggingface.endpoint',
    },
    agentServedModel('agent', 'triton', {}),
    agentServedModel('vllm', 'vllm', { managementTokenSecretRef: { name: 'vllm', key: 'key' } }),
  ];
}

/** An image preheat whose registry is the listener, with the namespace's registry credentials. */
function imagePreheat(name: string, manager: Record<string, unknown>, reason: string, field: string): Case {
  const url = `${tenant.url}/v2/library/model/manifests/latest`;
  const spec = { type: 'image', url, imageCredentialsSecretRef: { name: 'registry' }, manager };
  return { kind: 'ModelPreheat', name, spec, reason, field };
}

/** A directory ServedModel on static endpoints at the listener, its agent there too (the listener's port). */
function agentServedModel(name: string, driver: string, modelServer: Record<string, unknown>): Case {
  return {
    kind: 'ServedModel',
    name,
    spec: {
      modelName: name,
      files: { prefix: `${name}/` },
      preheat: {
        create: true,
        objectStorage: { type: 's3', bucket: 'models', credentialsSecretRef: { name: 'store' } },
      },
      modelServer: {
        driver,
        endpoints: [tenant.url],
        agent: { port: Number(new URL(tenant.url).port), tokenSecretRef: { name: 'agent', key: 'token' } },
        ...modelServer,
      },
    },
    reason: 'EndpointNotAllowed',
    field: 'spec.modelServer.endpoints',
  };
}

/** Deletes the cases' objects and waits until they are gone (their finalizers released). */
async function removeAll(cases: readonly Case[], namespace = ns): Promise<void> {
  for (const c of cases)
    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: PLURAL[c.kind],
      name: c.name,
    });
  await waitFor(
    'all deleted',
    async () => {
      const left = await Promise.all(
        cases.map((c) =>
          get(c.kind, c.name, namespace).then(
            () => c.name,
            () => undefined,
          ),
        ),
      );
      return left.every((l) => l === undefined) || undefined;
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  );
}

beforeAll(async () => {
  const kubeconfigPath = inject('kubeconfigPath');
  kc = kubeConfig(kubeconfigPath);
  custom = kc.makeApiClient(k8s.CustomObjectsApi);
  core = kc.makeApiClient(k8s.CoreV1Api);
  ns = await createNamespace(kc, 'reach');
  opNs = await createNamespace(kc, 'reach-operator');
  [tenant, admins, defaultManager] = await Promise.all([
    recordingListener(),
    recordingListener(),
    recordingListener(),
  ]);
  for (const [name, data] of Object.entries(SECRETS)) await secret(ns, name, data);
  await secret(opNs, 'cluster-manager-token', { token: CLUSTER_MANAGER_TOKEN });
  await secret(opNs, 'default-token', { token: DEFAULT_TOKEN });
  // The operator as a cluster runs it: its own process, the product's controllers, its default reach policy (no
  // --allowed-*-hosts), logging at debug so that its log can be searched for the planted values too.
  operator = await startOperatorProcess(kubeconfigPath, [
    '--no-leader-elect',
    '--leader-election-namespace',
    opNs,
    '--manager-url',
    defaultManager.url,
    '--manager-token-secret',
    'default-token',
    '--poll-backoff-start',
    '200ms',
    '--poll-backoff-max',
    '1s',
    '--log-level',
    'debug',
  ]);
});

afterAll(async () => {
  const exit = await operator?.stop();
  // A clean shutdown: SIGTERM ends it with 0 within its --shutdown-timeout.
  expect(exit).toBe(0);
  for (const name of clusterManagers)
    await custom
      .deleteClusterCustomObject({ group: GROUP, version: VERSION, plural: 'clustermanagers', name })
      .catch(() => undefined);
  await Promise.all([tenant?.close(), admins?.close(), defaultManager?.close()]);
});

describe('a namespaced resource cannot send a Secret where the admin did not allow', () => {
  it('refuses every confused-deputy path: the listener receives no request, each object is Stalled naming the rule', async () => {
    const origin = 'http://origin.example.com/models/m.mar';
    // Made by the admin for another namespace, with a token from the operator's namespace.
    await clusterManager(`${ns}-other-team`, {
      url: tenant.url,
      tokenSecretRef: { name: 'cluster-manager-token', key: 'token' },
      namespaces: ['someone-else'],
    });
    const cases = managerAndEndpointCases(origin);
    for (const c of cases) await create(c.kind, c.name, c.spec);

    for (const c of cases) {
      const cond = await stalled(c.kind, c.name);
      expect(cond.reason, `${c.kind} ${c.name}`).toBe(c.reason);
      expect(cond.message, `${c.kind} ${c.name}`).toContain(c.field);
      for (const v of [...PLANTED, CLUSTER_MANAGER_TOKEN]) expect(cond.message).not.toContain(v);
    }
    expect((await get('ModelPreheat', 'pat')).status?.phase).toBe('BLOCKED');

    // Reconciles go on (the refused ModelPreheats look again every minute; resyncs): give them time to misbehave.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(leaked(tenant.requests, [...PLANTED, CLUSTER_MANAGER_TOKEN, DEFAULT_TOKEN])).toEqual([]);
    expect(tenant.requests.map((r) => `${r.method} ${r.url}`)).toEqual([]);

    // Deleting them contacts nobody: the finalizers go without a request to the refused hosts.
    await removeAll(cases);
    expect(tenant.requests.map((r) => `${r.method} ${r.url}`)).toEqual([]);
    // Nothing went to the operator's default manager either: every object named a manager of its own.
    expect(defaultManager.requests).toEqual([]);
    // Nor did any planted value reach the operator's own log (debug level), in any encoding.
    const log = await operator.logs();
    for (const c of cases) expect(log).toContain(`"key":"${ns}/${c.name}"`); // each refused object was reconciled
    expect(
      [...PLANTED, CLUSTER_MANAGER_TOKEN, DEFAULT_TOKEN].filter((v) => forms(v).some((f) => log.includes(f))),
    ).toEqual([]);
  });

  it("a ClusterManager made for the namespace is used, with its token from the operator's namespace", async () => {
    await clusterManager(`${ns}-shared`, {
      url: admins.url,
      apiPath: '/oapi/v1',
      tokenSecretRef: { name: 'cluster-manager-token', key: 'token' },
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
    });
    await create('ModelPreheat', 'shared', {
      url: 'http://origin.example.com/models/m.mar',
      manager: { clusterManagerRef: { name: `${ns}-shared` } },
      retry: { limit: 0 },
    });
    const job = await waitFor(
      'the job request on the admin-chosen manager',
      () => admins.requests.find((r) => r.method === 'POST' && r.url === '/oapi/v1/jobs'),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(job.headers.authorization).toBe(`Bearer ${CLUSTER_MANAGER_TOKEN}`);
    expect(JSON.parse(job.body)).toMatchObject({ type: 'preheat' });
    expect(tenant.requests).toEqual([]);
  });
});

/**
 * Every path on which object-storage or registry credentials leave, with the manager allowed (an admin's
 * ClusterManager whose seed peer really fetches what a job names): keys and prefixes of each storage kind whose
 * `endpoint` is the tenant's listener, an image whose registry is the listener, a ServedModel directory stored there.
 */
function credentialCases(clusterManager: string): Case[] {
  const manager = { clusterManagerRef: { name: clusterManager } };
  const store = (type: string, extra: Record<string, unknown>, secret: string) => ({
    type,
    endpoint: tenant.url,
    credentialsSecretRef: { name: secret },
    ...extra,
  });
  const kinds: [string, Record<string, unknown>, string][] = [
    ['s3', { bucket: 'models', pathStyle: true }, 'store'],
    // Its own bucket: the same path as s3's would be the same P2P task, which the seed peer serves from its cache.
    ['gcs', { bucket: 'gcs-models' }, 'gcs'],
    ['abs', { accountName: 'acct', container: 'models' }, 'abs'],
    // Virtual-hosted only: the bucket goes before the host, and `models.127.0.0.1` is no host at all.
    ['oss', { bucket: 'models', endpoint: `http://localhost:${new URL(tenant.url).port}` }, 'oss'],
  ];
  const field = 'spec.objectStorage.endpoint';
  return [
    ...kinds.flatMap(([type, extra, secret]): Case[] => [
      {
        kind: 'ModelPreheat',
        name: `${type}-keys`,
        spec: { objectStorage: { ...store(type, extra, secret), keys: ['m/w.bin'] }, manager },
        reason: 'StorageEndpointNotAllowed',
        field,
      },
      {
        kind: 'ModelPreheat',
        name: `${type}-prefix`,
        spec: { objectStorage: { ...store(type, extra, secret), prefix: 'm/' }, manager },
        reason: 'StorageEndpointNotAllowed',
        field,
      },
    ]),
    imagePreheat('registry', manager, 'RegistryNotAllowed', 'spec.url'),
    {
      kind: 'ServedModel',
      name: 'directory',
      spec: {
        modelName: 'm',
        files: { prefix: 'm/' },
        preheat: { create: true, objectStorage: store('s3', { bucket: 'models', pathStyle: true }, 'store') },
        modelServer: {
          driver: 'triton',
          service: { name: 'triton', port: 8000 },
          agent: { port: 8095, tokenSecretRef: { name: 'agent', key: 'token' } },
        },
      },
      reason: 'StorageEndpointNotAllowed',
      field: 'spec.preheat.objectStorage.endpoint',
    },
  ];
}

describe('object-storage and registry credentials go only where the admin allowed', () => {
  let peer: PeerProxy;
  let p2p: ManagerEmulator;
  beforeAll(async () => {
    peer = await startPeerProxy();
    p2p = await startManagerEmulator({ peer });
  });
  afterAll(async () => {
    await Promise.all([p2p?.close(), peer?.close()]);
  });

  it("with the manager allowed, every storage kind (keys and prefixes) and a registry at the tenant's host are refused before the Secret is read", async () => {
    await clusterManager(`${ns}-p2p`, { url: p2p.url, namespaces: [ns] });
    const cases = credentialCases(`${ns}-p2p`);
    for (const c of cases) await create(c.kind, c.name, c.spec);
    for (const c of cases) {
      const cond = await stalled(c.kind, c.name);
      expect(cond.reason, `${c.kind} ${c.name}`).toBe(c.reason);
      expect(cond.message, `${c.kind} ${c.name}`).toContain(c.field);
      for (const v of PLANTED) expect(cond.message).not.toContain(v);
    }
    await new Promise((r) => setTimeout(r, 3_000));
    expect(tenant.requests.map((r) => `${r.method} ${r.url}`)).toEqual([]);
    // The admin's manager got no job either: its seed peers would have fetched the signed URLs from the tenant.
    expect(p2p.log.filter((r) => r.method === 'POST')).toEqual([]);
    expect(
      leaked(
        p2p.log.map((r) => ({ method: r.method, url: r.path, headers: {}, body: r.body })),
        PLANTED,
      ),
    ).toEqual([]);
    const log = await operator.logs();
    expect(PLANTED.filter((v) => forms(v).some((f) => log.includes(f)))).toEqual([]);
    await removeAll(cases);
  });
});

describe('evictOnDelete never evicts a task another resource still uses', () => {
  let peer: PeerProxy;
  let origin: Origin;
  let manager: ManagerEmulator;
  let other: string;
  beforeAll(async () => {
    origin = await startOrigin({ '/models/shared.mar': 'shared weights' });
    peer = await startPeerProxy();
    manager = await startManagerEmulator({ peer });
    other = await createNamespace(kc, 'reach-b');
  });
  afterAll(async () => {
    await Promise.all([manager?.close(), peer?.close(), origin?.close()]);
  });

  const deleteTaskJobs = () =>
    manager.log.filter(
      (r) => r.method === 'POST' && r.path.endsWith('/jobs') && r.body.includes('delete_task'),
    );
  const eventsOf = async (namespace: string, name: string) =>
    (await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace })).items
      .filter((e) => e.regarding?.name === name)
      .map((e) => `${e.reason}: ${e.note}`);
  const gone = (namespace: string, name: string) =>
    waitFor(
      `${namespace}/${name} deleted`,
      () =>
        get('ModelPreheat', name, namespace).then(
          () => undefined,
          () => true,
        ),
      { timeoutMs: 30_000, intervalMs: 100 },
    );

  it('two tenants preheat the same URL: the first delete keeps the task, the last one evicts it', async () => {
    // One manager shared by both namespaces, as an admin would set it up.
    await clusterManager(`${ns}-shared-evict`, { url: manager.url, namespaces: [ns, other] });
    const spec = {
      url: `${origin.url}/models/shared.mar`,
      manager: { clusterManagerRef: { name: `${ns}-shared-evict` } },
      evictOnDelete: true,
    };
    await create('ModelPreheat', 'evict-a', spec);
    await create('ModelPreheat', 'evict-b', spec, other);
    const done = (namespace: string, name: string) =>
      waitFor(
        `${namespace}/${name} SUCCESS`,
        async () => {
          const o = await get('ModelPreheat', name, namespace);
          return o.status?.state === 'SUCCESS' && o.status.tasks?.length ? o : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 100 },
      );
    const [a, b] = await Promise.all([done(ns, 'evict-a'), done(other, 'evict-b')]);
    expect(a.status!.tasks![0]!.taskID).toBe(b.status!.tasks![0]!.taskID);

    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: 'modelpreheats',
      name: 'evict-a',
    });
    await gone(ns, 'evict-a');
    expect(deleteTaskJobs()).toEqual([]);
    expect(await eventsOf(ns, 'evict-a')).toContainEqual(
      'EvictionSkipped: 1 task(s) not evicted: still used by a ModelPreheat in another namespace',
    );
    // The Event in this namespace never names the other tenant's namespace or resource.
    expect((await eventsOf(ns, 'evict-a')).join('\n')).not.toContain(other);

    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: other,
      plural: 'modelpreheats',
      name: 'evict-b',
    });
    await gone(other, 'evict-b');
    expect(deleteTaskJobs()).toHaveLength(1);
    expect(deleteTaskJobs()[0]!.body).toContain(a.status!.tasks![0]!.taskID);
  });
});

/**
 * The control: the same objects with the same Secrets, the operator started again with the four lists opened to the
 * listener's address. Now the listener receives the planted values, so the refusals above are what kept them.
 */
describe('opening the allow-lists sends the credentials to the tenant (the test can fail)', () => {
  let peer: PeerProxy;
  let p2p: ManagerEmulator;
  let open: string;
  beforeAll(async () => {
    peer = await startPeerProxy();
    p2p = await startManagerEmulator({ peer });
    open = await createNamespace(kc, 'reach-open');
    for (const [name, data] of Object.entries(SECRETS)) await secret(open, name, data);
    expect(await operator.stop()).toBe(0);
    operator = await startOperatorProcess(inject('kubeconfigPath'), [
      '--no-leader-elect',
      '--leader-election-namespace',
      opNs,
      '--namespace',
      open,
      '--poll-backoff-start',
      '200ms',
      '--poll-backoff-max',
      '1s',
      ...['--allowed-manager-hosts', '127.0.0.1', '--allowed-endpoint-hosts', '127.0.0.1'],
      ...[
        '--allowed-storage-hosts',
        'http://127.0.0.1,http://localhost,http://*.localhost',
        '--allowed-registry-hosts',
        'http://127.0.0.1',
        '--allowed-hub-hosts',
        'http://127.0.0.1',
      ],
    ]);
  });
  afterAll(async () => {
    await Promise.all([p2p?.close(), peer?.close()]);
  });

  it('the listener (directly, or through the seed peer of the allowed manager) receives them', async () => {
    tenant.requests.length = 0;
    await clusterManager(`${open}-p2p`, { url: p2p.url, namespaces: [open] });
    const cases: Case[] = [
      ...credentialCases(`${open}-p2p`),
      ...managerAndEndpointCases('http://origin.example.com/m.mar').filter((c) =>
        ['pat', 'signin', 'static', 'hub'].includes(c.name),
      ),
    ];
    for (const c of cases) await create(c.kind, c.name, c.spec, open);
    // Received by the listener itself: the manager's token and sign-in, the model server's key, the s3 keys of the
    // listing and of the seed peer's fetch, the gcs service account of a signed URL, the registry's user.
    // And the Hub token of a source whose endpoint is the listener (the listing asks it for the revision).
    const expected = [
      SECRETS.pat.token,
      SECRETS.user.username,
      SECRETS.user.password,
      SECRETS.ts.key,
      SECRETS.store.access_key,
      SECRETS.store.session_token,
      GCS_VALUES[0]!,
      SECRETS.registry.username,
      SECRETS.registry.password,
      SECRETS.hf.token,
    ];
    const got = await waitFor(
      'the planted values at the listener',
      () => {
        const values = new Set(leaked(tenant.requests, expected));
        return expected.every((v) => values.has(v)) ? values : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    ).catch(() => new Set(leaked(tenant.requests, expected)));
    expect(expected.filter((v) => !got.has(v))).toEqual([]);
    // abs: a SAS (the seed peer's fetch) and a Shared Key signature (the listing), each usable at the real account.
    const abs = tenant.requests.filter((r) => r.url.startsWith('/acct/models'));
    expect(abs.some((r) => /[?&]sig=/.test(r.url))).toBe(true);
    expect(abs.some((r) => String(r.headers.authorization ?? '').startsWith('SharedKey acct:'))).toBe(true);
    // oss: virtual-hosted at models.localhost, which this machine need not resolve, so the evidence is the job the
    // allowed manager received: its seed peers send the access key id (and a replayable V1 signature) there.
    const ossJob = () =>
      p2p.log.find(
        (r) =>
          r.method === 'POST' &&
          r.path.endsWith('/jobs') &&
          r.body.includes(`OSSAccessKeyId=${SECRETS.oss.access_key_id}`),
      );
    const job = await waitFor('the oss job on the allowed manager', ossJob, {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    expect(job.body).toContain(`http://models.localhost:${new URL(tenant.url).port}/m/w.bin?`);
    // Not deleted: their finalizers would now clean up at the listener, until the grace period ends.
  });
});
