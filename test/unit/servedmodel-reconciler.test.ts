/**
 * The ServedModel reconciler with a second model-server driver, a fake one registered in the driver registry (no
 * controller code knows it), against an in-memory apiserver whose watch the test delivers by hand: the
 * ServedModel reaches Ready through the fake driver; a cache behind our own last write is not acted on; a status
 * write lost to a conflict loses no registration outcome (localHit) and records no Event twice; a directory listed
 * again is checked against the digest its status recorded.
 */
import { describe, expect, it, vi } from 'vitest';
import {
  GVR,
  ServedModelSpec,
  type ModelPreheat,
  type ServedModel,
  type ServedModelStatus,
} from '../../src/api/index.ts';
import { ModelDirectories } from '../../src/controllers/servedmodel/files.ts';
import { listingDigest } from '../../src/controllers/modelpreheat/directory.ts';
import type { ListedObject } from '../../src/storage/fileset.ts';
import { ServedModelReconciler } from '../../src/controllers/servedmodel/reconciler.ts';
import { ReplicaGates } from '../../src/controllers/servedmodel/gates.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { RegistrationRunner } from '../../src/controllers/servedmodel/registrations.ts';
import { statusWriter } from '../../src/controllers/status.ts';
import {
  ApiError,
  StatusConflict,
  StatusWriter,
  type KubeClient,
  type ReconcileContext,
} from '../../src/runtime/index.ts';
import {
  ModelServerDrivers,
  type Failure,
  type ModelLayout,
  type ModelServerDriver,
  type ModelVersion,
  type Registered,
  type Registration,
  type ReplicaRef,
  type ReplicaServer,
} from '../../src/servers/driver.ts';

const KEY = 'ns/resnet';
const ENDPOINTS = ['http://198.18.0.1:8080', 'http://198.18.0.2:8080'];

/** A model server that is not TorchServe: one version at a time, workers start at once, no default switch. */
class FakeServer implements ReplicaServer {
  models = new Map<string, ModelVersion>();
  calls = 0;
  registered: Registration[] = [];
  readonly localHit: boolean;
  constructor(localHit: boolean) {
    this.localHit = localHit;
  }
  async describe(model: string) {
    this.calls++;
    return this.models.get(model);
  }
  async versions(model: string) {
    this.calls++;
    return [...this.models.entries()].filter(([m]) => m === model).map(([, v]) => v);
  }
  async register(reg: Registration): Promise<Registered> {
    this.calls++;
    this.registered.push(reg);
    this.models.set(reg.modelName, { version: '1', minWorkers: 0, maxWorkers: 0, readyWorkers: 0 });
    return { version: '1', localHit: this.localHit };
  }
  async scale(model: string, _v: string, w: { min: number; max: number }) {
    this.calls++;
    this.models.set(model, { version: '1', minWorkers: w.min, maxWorkers: w.max, readyWorkers: w.min });
  }
  async unregister(model: string) {
    this.models.delete(model);
  }
  async unregisterAll(model: string) {
    this.models.delete(model);
  }
}

class FakeDriver implements ModelServerDriver {
  readonly name = 'fake';
  readonly layouts: readonly ModelLayout[];
  constructor(layouts: readonly ModelLayout[] = ['archive']) {
    this.layouts = layouts;
  }
  readonly servers = new Map(ENDPOINTS.map((e, i) => [e, new FakeServer(i === 0)]));
  replica(_o: unknown, _a: unknown, r: ReplicaRef): ReplicaServer {
    return this.servers.get(r.endpoint)!;
  }
  prune(): void {}
  failure(): Failure | undefined {
    return undefined;
  }
  get calls() {
    return [...this.servers.values()].reduce((n, s) => n + s.calls, 0);
  }
}

/** RFC 7386, for the fake apiserver. */
function merge(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = merge(out[k], v);
  }
  return out;
}

/** The apiserver's copy of the object, the cache the reconciler reads, and a watch the test delivers. */
class FakeApi {
  stored: ServedModel;
  cached: ServedModel;
  private rv = 1;
  conflictNext = false;
  statusWrites = 0;

  constructor(obj: ServedModel) {
    this.stored = structuredClone({ ...obj, metadata: { ...obj.metadata, resourceVersion: '1' } });
    this.cached = structuredClone(this.stored);
  }

  private apply(patch: { metadata?: { resourceVersion?: string } }): ServedModel {
    const pre = patch.metadata?.resourceVersion;
    if (this.conflictNext || (pre !== undefined && pre !== this.stored.metadata.resourceVersion)) {
      this.conflictNext = false;
      throw new ApiError(409, 'Conflict', 'the object has been modified');
    }
    const next = merge(this.stored, patch) as ServedModel;
    next.metadata.resourceVersion = String(++this.rv);
    this.stored = next;
    return structuredClone(next);
  }

  /** Someone else's write (e.g. kubectl annotate): a new resourceVersion. */
  touch(): void {
    this.stored = {
      ...this.stored,
      metadata: { ...this.stored.metadata, resourceVersion: String(++this.rv) },
    };
  }

  deliver(): void {
    this.cached = structuredClone(this.stored);
  }

  readonly kube = {
    resource: () => ({
      patchStatus: async (_ns: string, _n: string, patch: { metadata?: { resourceVersion?: string } }) => {
        const out = this.apply(patch);
        this.statusWrites++;
        return out;
      },
      patch: async (_ns: string, _n: string, patch: { metadata?: { resourceVersion?: string } }) =>
        this.apply(patch),
    }),
  } as unknown as KubeClient;
}

interface SetupOptions {
  /** Replaces the ServedModel's spec. */
  spec?: Record<string, unknown>;
  layouts?: readonly ModelLayout[];
  /** The ModelPreheat the gate reads (by any name). */
  preheat?: ModelPreheat;
  directories?: ModelDirectories;
  /** The admin's --allowed-storage-hosts. */
  storageHosts?: string;
  /** The object is being deleted. */
  deleting?: boolean;
}

function setup(opts: SetupOptions = {}) {
  const api = new FakeApi({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ServedModel',
    metadata: {
      name: 'resnet',
      namespace: 'ns',
      uid: 'uid-1',
      generation: 1,
      ...(opts.deleting
        ? { deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: ['peerload.io/unregister-model'] }
        : {}),
    },
    spec: opts.spec ?? {
      modelName: 'resnet',
      fileName: 'models/resnet.mar',
      modelServer: { endpoints: ENDPOINTS, driver: 'fake' },
    },
  } as unknown as ServedModel);
  const driver = new FakeDriver(opts.layouts);
  const events: string[] = [];
  const cleanUps: string[] = [];
  const enqueued: string[] = [];
  const writer = new StatusWriter(api.kube);
  const registrations = new RegistrationRunner<Registered>({ global: 8, onChange: (k) => enqueued.push(k) });
  const reconciler = new ServedModelReconciler({
    kube: api.kube,
    events: { record: (_o, type, reason, note) => void events.push(`${type}/${reason}: ${note}`) },
    config: {
      pollBackoffStart: 1_000,
      pollBackoffMax: 10_000,
      // Static endpoints are contacted only where the admin allows them.
      allowedEndpointHosts: parseHostRules('198.18.0.0/16', 'any'),
      // Its store on loopback, as the admin's list names it.
      allowedStorageHosts: parseHostRules(opts.storageHosts ?? 'http://127.0.0.1:9000'),
    },
    model: () => api.cached,
    slices: () => [],
    gates: new ReplicaGates({
      kube: api.kube,
      preheats: { getByName: () => opts.preheat } as never,
      nodeAddresses: {} as never,
      batchWindowMs: 0,
    }),
    drivers: new ModelServerDrivers([driver]),
    directories: opts.directories,
    registrations,
    writeStatus: statusWriter<ServedModel, ServedModelStatus>({ status: writer }, GVR.servedModels, {
      conflict: 'fail',
    }),
    writes: writer,
    cleanUp: async () => void cleanUps.push(KEY),
    metrics: {
      servedModelReplicas: () => undefined,
      modelServerErrors: { labels: () => ({ inc: () => undefined }) } as never,
    },
  });
  const rc = { signal: new AbortController().signal } as ReconcileContext;
  const idle = () => vi.waitFor(() => expect(registrations.inFlight).toBe(0));
  const pass = () => reconciler.reconcile(KEY, rc);
  const ready = () => api.stored.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
  return { api, driver, events, registrations, pass, idle, ready, cleanUps };
}

/** The ServedModel's Stalled condition, once checked to be True for `reason`. */
function stalledFor(t: ReturnType<typeof setup>, reason: string) {
  const stalled = t.api.stored.status!.conditions!.find((c) => c.type === 'Stalled');
  expect(stalled).toMatchObject({ status: 'True', reason });
  return stalled!;
}

const registeredEvents = (events: string[]) => events.filter((e) => e.includes('/ModelRegistered'));

describe('ServedModelReconciler with a second (fake) model-server driver', () => {
  it('reconciles a ServedModel to Ready through it, the seed first; each registration has one Event', async () => {
    const t = setup();
    for (let i = 0; i < 10 && !t.ready(); i++) {
      await t.pass();
      t.api.deliver();
      await t.idle();
    }
    expect(t.ready()).toBe(true);
    const status = t.api.stored.status!;
    expect(status).toMatchObject({ readyReplicas: 2, desiredReplicas: 2, ready: '2/2', servedVersion: '1' });
    expect(status.replicas!.map((r) => [r.endpoint, r.phase, r.localHit])).toEqual([
      [ENDPOINTS[0], 'Ready', true],
      [ENDPOINTS[1], 'Ready', false],
    ]);
    expect(registeredEvents(t.events)).toEqual([
      `Normal/ModelRegistered: registered resnet 1 on ${ENDPOINTS[0]} (peer cache hit)`,
      `Normal/ModelRegistered: registered resnet 1 on ${ENDPOINTS[1]} (downloaded through the peer)`,
    ]);
    expect(t.events.filter((e) => e.startsWith('Normal/Ready'))).toHaveLength(1);
    // Settled: the outcome lives in status now, read back from the object by later passes.
    await t.pass();
    expect(t.api.stored.status!.replicas!.map((r) => r.localHit)).toEqual([true, false]);
    expect(registeredEvents(t.events)).toHaveLength(2);
  });

  it('a cache behind our last write: the pass looks again soon and does nothing', async () => {
    const t = setup();
    await t.pass(); // writes the first status; the watch has not delivered it
    const calls = t.driver.calls;
    const writes = t.api.statusWrites;
    expect(await t.pass()).toEqual({ requeueAfter: 50 });
    expect(t.driver.calls).toBe(calls);
    expect(t.api.statusWrites).toBe(writes);
    t.api.deliver();
    await t.idle();
    await t.pass();
    expect(t.api.statusWrites).toBe(writes + 1);
  });

  it('a status write lost to a conflict: thrown, and the next pass writes the registration outcome; one Event each', async () => {
    const t = setup();
    await t.pass(); // the seed's registration starts
    t.api.deliver();
    await t.idle();
    t.api.conflictNext = true;
    await expect(t.pass()).rejects.toBeInstanceOf(StatusConflict);
    // The registration's Event is recorded when a pass first sees it ended; it stays unsettled, its outcome unwritten.
    expect(registeredEvents(t.events)).toHaveLength(1);
    expect(
      t.registrations.peek({
        uid: 'uid-1',
        owner: KEY,
        replica: ENDPOINTS[0]!,
        version: '|models/resnet.mar',
      }),
    ).toMatchObject({ state: 'done' });
    // The whole reconcile runs again on fresh data.
    t.api.touch();
    t.api.deliver();
    await t.pass();
    // Both replicas' registrations ended by then (the other one started in the pass that lost its write).
    expect(t.api.stored.status!.replicas!.map((r) => [r.registered, r.localHit])).toEqual([
      [true, true],
      [true, false],
    ]);
    expect(registeredEvents(t.events)).toHaveLength(2);
    await t.pass();
    expect(registeredEvents(t.events)).toHaveLength(2);
  });
});

/** A ServedModel that is a directory in an s3 bucket, gated by a ModelPreheat that succeeded. */
const DIRECTORY_SPEC = {
  modelName: 'llama',
  files: { prefix: 'models/llama', exclude: ['*.md'] },
  modelServer: { endpoints: ENDPOINTS, driver: 'fake' },
  preheat: {
    name: 'llama-preheat',
    objectStorage: {
      type: 's3',
      bucket: 'weights',
      endpoint: 'http://127.0.0.1:9000',
      pathStyle: true,
      credentialsSecretRef: { name: 's3' },
      filteredQueryParams: ['X-Amz-Signature', 'X-Amz-Date'],
    },
  },
};

const LISTED: ListedObject[] = [
  { key: 'models/llama/', size: 0 },
  { key: 'models/llama/config.json', size: 20 },
  { key: 'models/llama/model-00001.safetensors', size: 3000 },
  { key: 'models/llama/README.md', size: 9 },
  { key: 'models/llama-other/x.bin', size: 5 },
];

const succeededPreheat = {
  metadata: { name: 'llama-preheat', namespace: 'ns', generation: 1 },
  spec: { tag: 'models', objectStorage: { filteredQueryParams: ['X-Amz-Signature', 'X-Amz-Date'] } },
  status: {
    conditions: [
      { type: 'Succeeded', status: 'True', reason: 'JobSucceeded', message: 'ok', observedGeneration: 1 },
      { type: 'Ready', status: 'True', reason: 'JobSucceeded', message: 'ok', observedGeneration: 1 },
    ],
  },
} as unknown as ModelPreheat;

function directories(listed: ListedObject[] = LISTED) {
  const lists: string[] = [];
  const secretReads: string[] = [];
  const dirs = new ModelDirectories({
    secretData: async (namespace, name) => {
      secretReads.push(`${namespace}/${name}`);
      // As the apiserver returns a Secret's data: base64.
      const b64 = (v: string) => Buffer.from(v).toString('base64');
      return { access_key: b64('AKIDEXAMPLE'), secret_key: b64('planted-secret-key-value') };
    },
    lister: async (_location, credentials, prefix) => {
      expect(credentials).toMatchObject({ type: 's3', secretAccessKey: 'planted-secret-key-value' });
      lists.push(prefix);
      return listed;
    },
  });
  return { dirs, lists, secretReads };
}

async function converge(t: ReturnType<typeof setup>) {
  for (let i = 0; i < 10 && !t.ready(); i++) {
    await t.pass();
    t.api.deliver();
    await t.idle();
  }
}

describe('ServedModelReconciler with a model that is a directory (spec.files)', () => {
  /** A directory ServedModel on a driver of directories, converged to Ready on `objects` (mutable: later listings). */
  async function convergedDirectory(objects: ListedObject[] = LISTED, preheat = succeededPreheat) {
    const d = directories(objects);
    const t = setup({ spec: DIRECTORY_SPEC, layouts: ['directory'], preheat, directories: d.dirs });
    await converge(t);
    expect(t.ready()).toBe(true);
    return { d, t };
  }

  it('lists the prefix once with preheat.objectStorage, and every replica registers with Registration.files', async () => {
    const { d, t } = await convergedDirectory();
    expect(d.lists).toEqual(['models/llama']);
    expect(d.secretReads).toEqual(['ns/s3']);
    for (const server of t.driver.servers.values()) {
      expect(server.registered).toHaveLength(1);
      const reg = server.registered[0]!;
      expect(reg.fileName).toBe('models/llama/');
      expect(reg.files).toEqual({
        files: [
          { path: 'config.json', key: 'models/llama/config.json', size: 20 },
          { path: 'model-00001.safetensors', key: 'models/llama/model-00001.safetensors', size: 3000 },
        ],
        storage: {
          type: 's3',
          bucket: 'weights',
          endpoint: 'http://127.0.0.1:9000',
          pathStyle: true,
          expiresSeconds: 3600,
        },
        // The preheat's task identity: its filter and tag, so each download is a hit on its tasks.
        filter: ['X-Amz-Signature', 'X-Amz-Date'],
        tag: 'models',
      });
      // No credential travels to the driver: the agent signs with its own.
      expect(JSON.stringify(reg)).not.toContain('planted-secret-key-value');
      expect(JSON.stringify(reg)).not.toContain('AKIDEXAMPLE');
    }
    expect(t.api.stored.status!.files).toEqual({
      count: 2,
      bytes: 3020,
      digest: expect.stringMatching(/^[0-9a-f]{16}$/),
    });
  });

  /** A directory ServedModel whose store is outside --allowed-storage-hosts, with what it reads recorded. */
  function outsideStorageList(o: { deleting?: boolean } = {}) {
    const d = directories();
    const t = setup({
      spec: DIRECTORY_SPEC,
      layouts: ['directory'],
      preheat: succeededPreheat,
      directories: d.dirs,
      storageHosts: '*.s3.*.amazonaws.com',
      ...o,
    });
    return { d, t };
  }

  it('a store outside --allowed-storage-hosts: Stalled (StorageEndpointNotAllowed), no Secret read, no listing, no replica asked', async () => {
    const { d, t } = outsideStorageList();
    await converge(t);
    const stalled = stalledFor(t, 'StorageEndpointNotAllowed');
    expect(stalled.message).toContain('spec.preheat.objectStorage.endpoint: host 127.0.0.1:9000');
    expect(stalled.message).toContain('--allowed-storage-hosts (*.s3.*.amazonaws.com)');
    expect(d.secretReads).toEqual([]);
    expect(d.lists).toEqual([]);
    expect(t.driver.calls).toBe(0);
  });

  it('being deleted, a store outside the list still lets the model be unregistered (deletion reads no storage Secret)', async () => {
    const { d, t } = outsideStorageList({ deleting: true });
    await t.pass();
    expect(t.cleanUps).toEqual([KEY]);
    expect(d.secretReads).toEqual([]);
    expect(t.events.filter((e) => e.includes('CleanupSkipped'))).toEqual([]);
  });

  it('a listing made again (the operator restarted) is checked against status.files.digest: other content is Stalled', async () => {
    const objects = [...LISTED];
    const { d, t } = await convergedDirectory(objects);
    const recorded = t.api.stored.status!.files!;
    expect(recorded.count).toBe(2);
    // The memory of the listing is gone (a restart) and a third file arrived under the prefix.
    d.dirs.forget(KEY);
    objects.push({ key: 'models/llama/model-00002.safetensors', size: 4000 });
    const registered = [...t.driver.servers.values()].map((s) => s.registered.length);
    await t.pass();
    t.api.deliver();
    const stalled = stalledFor(t, 'DirectoryNotListed');
    expect(stalled.message).toMatch(
      /^spec\.files: the objects under prefix "models\/llama" changed since this generation listed them /,
    );
    expect(stalled.message).toMatch(
      new RegExp(
        `\\(2 files, digest ${recorded.digest}; now 3 files, digest [0-9a-f]{16}\\): a directory's content is fixed per generation, edit the spec to place the new content$`,
      ),
    );
    // Nothing was placed from the changed listing, and the recorded listing stays.
    expect([...t.driver.servers.values()].map((s) => s.registered.length)).toEqual(registered);
    expect(t.api.stored.status!.files).toEqual(recorded);
    expect(d.lists).toHaveLength(2);
  });

  it("a listing made again that differs from status.files.digest but is the preheat's listing is taken", async () => {
    const objects = [...LISTED];
    const preheat = structuredClone(succeededPreheat);
    const { d, t } = await convergedDirectory(objects, preheat);
    d.dirs.forget(KEY);
    objects.push({ key: 'models/llama/model-00002.safetensors', size: 4000 });
    const three = [
      { key: 'models/llama/config.json', path: 'config.json', size: 20 },
      { key: 'models/llama/model-00001.safetensors', path: 'model-00001.safetensors', size: 3000 },
      { key: 'models/llama/model-00002.safetensors', path: 'model-00002.safetensors', size: 4000 },
    ];
    (preheat.status as Record<string, unknown>).files = {
      generation: 1,
      count: 3,
      bytes: 7020,
      digest: listingDigest(three),
    };
    await t.pass();
    t.api.deliver();
    expect(t.api.stored.status!.conditions!.find((c) => c.type === 'Stalled')).toBeUndefined();
    // The pass took the new listing (kept for the generation: not listed a third time).
    const kept = await d.dirs.of(KEY, t.api.stored, ServedModelSpec.parse(DIRECTORY_SPEC), preheat);
    expect(kept).toMatchObject({ ok: true, count: 3, digest: listingDigest(three) });
    expect(d.lists).toHaveLength(2);
  });

  it('a driver that loads archives only: Stalled (ModelLayoutUnsupported) before any replica is asked', async () => {
    const d = directories();
    const t = setup({ spec: DIRECTORY_SPEC, preheat: succeededPreheat, directories: d.dirs });
    await t.pass();
    const stalled = stalledFor(t, 'ModelLayoutUnsupported');
    expect(stalled.message).toBe(
      'the fake model server loads one archive, not a directory: set spec.fileName instead of spec.files',
    );
    expect(t.driver.calls).toBe(0);
    expect(d.lists).toEqual([]);
  });

  it('a driver the operator does not have: Stalled (UnknownDriver) naming the field and the drivers it has', async () => {
    const t = setup({
      spec: {
        modelName: 'resnet',
        fileName: 'models/resnet.mar',
        modelServer: { endpoints: ENDPOINTS, driver: 'tritonn' },
      },
    });
    await t.pass();
    const stalled = stalledFor(t, 'UnknownDriver');
    expect(stalled.message).toBe(
      'spec.modelServer.driver: the operator has no model-server driver named tritonn; use one of fake',
    );
    expect(t.driver.calls).toBe(0);
  });

  it('more files than maxFiles: Stalled naming the field, listed once for the generation', async () => {
    const d = directories();
    const spec = { ...DIRECTORY_SPEC, files: { prefix: 'models/llama/', maxFiles: 1 } };
    const t = setup({ spec, layouts: ['directory'], preheat: succeededPreheat, directories: d.dirs });
    await t.pass();
    t.api.deliver();
    await t.pass();
    const stalled = t.api.stored.status!.conditions!.find((c) => c.type === 'Stalled')!;
    expect(stalled.reason).toBe('DirectoryNotListed');
    expect(stalled.message).toMatch(
      /^spec\.files\.maxFiles: 3 files under prefix "models\/llama\/" match include\/exclude, above maxFiles 1: narrow include\/exclude or raise maxFiles/,
    );
    expect(d.lists).toHaveLength(1);
    expect(t.driver.calls).toBe(0);
  });
});
