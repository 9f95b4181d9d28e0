/**
 * Directory models on REAL OIP servers through the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon
 * 1.4.2: the run's shared one, test/support/shared-dragonfly.ts, its seed peer and two of its node peers, each on its
 * own 127.0.0.x address), from MinIO behind a counting proxy (its own port: its URLs, so its task ids, are this
 * file's alone).
 * Each server runs on two replicas, each with a real `peerload agent` beside it downloading through its node's peer
 * (a replica listens on its node's address, as a pod's traffic reaches its node's daemon; each server's agents on a
 * port of their own, as two ServedModels' agents are). Every version holds a data file above dfdaemon's minimum
 * piece length (`weights.bin`, random bytes, which the servers' loaders ignore) beside its small files, and for
 * each server:
 *   - version 1 is preheated into node A only by a manager job; the driver registers it on both replicas (A: every
 *     file a local hit, hard-linked; B: through the network, hard-linked as its daemon fills it), MinIO serves the data file once across both (files up
 *     to the minimum piece length are fetched by each peer from the origin itself), both describe it ready and
 *     answer an inference;
 *   - version 2 rolls out on both (A's peer from MinIO, B's from the peers), version 1 goes (its directory too), and
 *     unregistering leaves nothing.
 * Triton 2.51.0 serves a python-backend model (model.py, the offset it adds from offset.json): A loads with the
 * registration's config option, B with the config.pbtxt beside the versions, and the instance count scales.
 * MLServer 1.7.1 serves a scikit-learn model (model-settings.json + model.joblib), versions v1 and v2.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ManagerClient } from '../../src/manager/client.ts';
import type { ModelFiles, Registration, ReplicaServer } from '../../src/servers/driver.ts';
import { MLSERVER, OipDriver, TRITON } from '../../src/servers/oip/driver.ts';
import { effectiveFilter, type StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, type DragonflyPeerView, type DragonflyView } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY, echoConfig } from '../support/oip-exchanges.ts';
import { startMLServer, startTriton, writeSklearnModel, type OipServer } from '../support/oip-servers.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from '../support/oip-replicas.ts';
import { waitFor } from '../support/process.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';

const TOKEN = 'oip-e2e-agent-token-0123456789';
const BUCKET = fileBucket('models');
/** Every version's data file: above the minimum piece length, so the peers pass it to each other. */
const WEIGHTS = 'weights.bin';
const ECHO_FILES = ['model.py', 'offset.json', WEIGHTS];
const IRIS_FILES = ['model-settings.json', 'model.joblib', WEIGHTS];

type Replica = AgentReplica;

let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let location: StorageLocation & { type: 's3' };
let dispatcher: Agent;
let work: string;
const replicas: Replica[] = [];
/** Each object's body, by key. */
const objects = new Map<string, Buffer>();

async function put(key: string, body: Buffer): Promise<void> {
  await minio.putObject(BUCKET, key, body);
  objects.set(key, body);
}

/** Replicas A and B of one server, on node peers 0 and 1, their agents on one port free on both addresses. */
async function startPair(label: string, start: typeof startTriton): Promise<[Replica, Replica]> {
  // Taken while the other server's agents listen, so it is not theirs.
  const port = await portOnAll(network.peers.map((p) => p.ip));
  const pair: Replica[] = [];
  for (const [i, side] of ['a', 'b'].entries()) {
    const replica = await startAgentReplica({
      peer: network.peers[i]!,
      dir: join(work, `${label}-${side}`),
      port,
      token: TOKEN,
      credentials: minio,
      dispatcher,
      start,
    });
    replicas.push(replica);
    pair.push(replica);
  }
  return [pair[0]!, pair[1]!];
}

function driverReplica(driver: OipDriver, r: Replica): ReplicaServer {
  return driver.replica(
    { uid: 'e2e', namespace: 'ml' },
    { agent: { port: r.agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } } },
    { endpoint: r.server.url, pod: r.peer.name },
  );
}

const driverOf = (flavour: typeof TRITON | typeof MLSERVER) =>
  new OipDriver(flavour, { secret: () => Promise.resolve(TOKEN), placePollMs: 200 });

/** What the agent is asked for: object keys it signs itself, under the preheat's filter. */
const filesOf = (prefix: string, paths: string[]): ModelFiles => ({
  storage: {
    type: 's3',
    bucket: BUCKET,
    endpoint: origin.url,
    pathStyle: true,
    region: minio.region,
    expiresSeconds: 600,
  },
  filter: effectiveFilter(location),
  files: paths.map((p) => ({ path: p, key: `${prefix}/${p}` })),
});

/** Body bytes MinIO served for each file of a prefix, in `paths` order. */
const reads = (prefix: string, paths: string[]) =>
  paths.map((p) => origin.bytesServed(`/${BUCKET}/${prefix}/${p}`));

/** The minimum piece length of dfdaemon 1.4.2: content up to it is fetched by each peer from the origin itself. */
const MIN_PIECE = 4 * 1024 * 1024;

/**
 * What MinIO served for each file since `before` (a `reads` result), within the real network's bounds: a file above
 * the minimum piece length crossed at most `crossings` times, plus the daemon's 1-byte range probe per download
 * (made on a hit as well, so the signed URL is checked); a file up to it may cross once per downloading peer
 * (`smallCrossings`), since such content never travels between peers (docs/dragonfly.md).
 */
function expectServed(
  prefix: string,
  paths: string[],
  before: number[],
  bounds: { crossings: number; smallCrossings: number; downloads: number },
): number[] {
  const now = reads(prefix, paths);
  paths.forEach((p, i) => {
    const size = objects.get(`${prefix}/${p}`)!.length;
    const crossings = size > MIN_PIECE ? bounds.crossings : bounds.smallCrossings;
    expect(now[i]! - before[i]!, `${prefix}/${p}`).toBeLessThanOrEqual(crossings * size + bounds.downloads);
  });
  return now;
}

async function infer(server: OipServer, model: string, input: unknown, version?: string) {
  const path = version ? `/v2/models/${model}/versions/${version}/infer` : `/v2/models/${model}/infer`;
  const res = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [input] }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { model_version: string; outputs: { data: number[] }[] };
}

/** One model as a block serves it on its two replicas. */
interface Subject {
  driver: OipDriver;
  model: string;
  /** The model's directory in the bucket: a version's objects are under `${dir}/${version}`. */
  dir: string;
  /** A version's files, WEIGHTS among them. */
  files: string[];
  /** The registration's server options on a replica (default none). */
  options?: (version: string, r: Replica) => Registration['options'];
  /** Asks the replica's server for an inference and checks that `version` answered it. */
  inferOn: (r: Replica, version: string) => Promise<void>;
}

/** The model of a server flavour whose objects are under `dir` (its last segment the model's name). */
const subjectOf = (
  flavour: typeof TRITON | typeof MLSERVER,
  dir: string,
  files: string[],
  rest: Pick<Subject, 'options' | 'inferOn'>,
): Subject => ({ driver: driverOf(flavour), model: dir.split('/').pop()!, dir, files, ...rest });

const prefixOf = (s: Subject, version: string) => `${s.dir}/${version}`;

const registrationOf = (s: Subject, version: string, r: Replica): Registration => ({
  fileName: `${prefixOf(s, version)}/`,
  modelName: s.model,
  version,
  files: filesOf(prefixOf(s, version), s.files),
  options: s.options?.(version, r) ?? {},
});

/**
 * Preheats a version into one node's peer only (scope all_peers, its address), as a ModelPreheat targeting that
 * node does. Returns what MinIO served for each file by then (`reads`).
 */
async function preheatNode(s: Subject, version: string, peer: DragonflyPeerView): Promise<number[]> {
  const prefix = prefixOf(s, version);
  const before = reads(prefix, s.files);
  const manager = new ManagerClient({
    baseURL: network.managerURL,
    auth: { type: 'signIn', username: ROOT_USER.name, password: ROOT_USER.password },
  });
  try {
    const urls = [];
    for (const p of s.files)
      urls.push(
        (await signObjectURL(location, `${prefix}/${p}`, minio.credentials(), { expiresSeconds: 600 })).url,
      );
    const job = await manager.createPreheatJob({
      type: 'file',
      urls,
      filteredQueryParams: effectiveFilter(location),
      // The tag the storage credentials give these private objects, as the operator's preheat and the agents use.
      tag: credentialTag(location, minio.credentials()),
      scope: 'all_peers',
      ips: [peer.ip],
    });
    const done = await waitFor(
      `preheat job ${job.id}`,
      async () => {
        const j = await manager.getJob(job.id);
        if (j.state === 'FAILURE') throw new Error(`preheat job ${job.id} failed`);
        return j.state === 'SUCCESS' && j;
      },
      { timeoutMs: 300_000, intervalMs: 1_000 },
    );
    expect(done.state).toBe('SUCCESS');
  } finally {
    await manager.close();
  }
  // The preheat brought every file across: the seed peer and the node's (each at most once).
  const preheated = expectServed(prefix, s.files, before, { crossings: 2, smallCrossings: 2, downloads: 2 });
  s.files.forEach((p, i) =>
    expect(preheated[i]! - before[i]!, p).toBeGreaterThanOrEqual(objects.get(`${prefix}/${p}`)!.length),
  );
  return preheated;
}

/**
 * Registers a version preheated into A's node (`preheated`: what MinIO had served by then) on both replicas: A
 * from local hits, B through the network, and both serve it. Returns what MinIO served for each file by the end.
 */
async function registerPreheated(
  s: Subject,
  version: string,
  [a, b]: [Replica, Replica],
  preheated: number[],
): Promise<number[]> {
  const prefix = prefixOf(s, version);
  const progress: string[] = [];
  const onA = await driverReplica(s.driver, a).register(registrationOf(s, version, a), {
    progress: (m) => progress.push(m),
  });
  expect(onA).toEqual({ version, localHit: true });
  expect(progress).toContain(`loading ${s.model} ${version}`);
  // A's local hits read nothing from MinIO but the daemon's probes.
  const afterA = expectServed(prefix, s.files, preheated, { crossings: 0, smallCrossings: 0, downloads: 1 });
  const onB = await driverReplica(s.driver, b).register(registrationOf(s, version, b), {});
  expect(onB).toEqual({ version, localHit: false });
  // B's peer got the data file from the other peers: MinIO served it once in all, across both replicas.
  const afterB = expectServed(prefix, s.files, afterA, { crossings: 0, smallCrossings: 1, downloads: 1 });

  for (const r of [a, b]) {
    expect(await driverReplica(s.driver, r).describe(s.model, undefined, {})).toEqual({
      version,
      minWorkers: 1,
      maxWorkers: 1,
      readyWorkers: 1,
    });
    expect(await readFile(join(r.root, s.model, version, WEIGHTS))).toEqual(
      objects.get(`${prefix}/${WEIGHTS}`),
    );
    await s.inferOn(r, version);
  }
  // The servers run as root here, which could write a hard link of the daemon's file: both agents copied it (one
  // name for its inode), whether the daemon held it (A) or filled it during the download (B). Links for a non-root
  // server: test/e2e/agent-real-p2p.test.ts.
  for (const r of [a, b]) expect((await stat(join(r.root, s.model, version, WEIGHTS))).nlink, r.root).toBe(1);
  return afterB;
}

/**
 * Rolls both replicas from `from` to `to` (not preheated): `to` loads beside `from` and answers, then `from` goes,
 * its directory too. Returns what MinIO served for each file of `to`.
 */
async function rollOnBoth(s: Subject, from: string, to: string, pair: [Replica, Replica]): Promise<number[]> {
  const prefix = prefixOf(s, to);
  let served = reads(prefix, s.files);
  for (const r of pair) {
    const server = driverReplica(s.driver, r);
    expect(await server.register(registrationOf(s, to, r), {})).toMatchObject({ version: to });
    // A's peer fetched it from MinIO (the seed peer may have at the same moment), B's from the peers, and only the
    // files up to a piece from MinIO again.
    served =
      r === pair[0]
        ? expectServed(prefix, s.files, served, { crossings: 2, smallCrossings: 2, downloads: 2 })
        : expectServed(prefix, s.files, served, { crossings: 0, smallCrossings: 1, downloads: 1 });
    expect((await server.versions(s.model, {})).map((v) => v.version)).toEqual([from, to]);
    expect((await server.describe(s.model, undefined, {}))?.version).toBe(to);
    await s.inferOn(r, to);
    await server.unregister(s.model, from, {});
    expect((await server.versions(s.model, {})).map((v) => v.version)).toEqual([to]);
    await expect(stat(join(r.root, s.model, from))).rejects.toThrow(/ENOENT/);
  }
  expect(served[s.files.indexOf(WEIGHTS)]).toBeGreaterThanOrEqual(
    objects.get(`${prefix}/${WEIGHTS}`)!.length,
  );
  return served;
}

/** Unregisters the model on both replicas: no version served, `last`'s directory gone. */
async function unregisterOnBoth(s: Subject, last: string, pair: [Replica, Replica]): Promise<void> {
  for (const r of pair) {
    const server = driverReplica(s.driver, r);
    await server.unregisterAll(s.model, {});
    expect(await server.versions(s.model, {})).toEqual([]);
    await expect(stat(join(r.root, s.model, last))).rejects.toThrow(/ENOENT/);
  }
}

beforeAll(async () => {
  network = await sharedDragonfly(inject('dragonflyService'), 2);
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  origin = await startCountingProxy(minio.endpoint);
  // Signed URLs name the counting proxy as the endpoint: MinIO verifies the signature over the same Host.
  location = { ...minio.location(BUCKET), endpoint: origin.url };
  work = await mkdtemp(join(tmpdir(), 'peerload-oip-e2e-'));
  for (const v of ['1', '2']) {
    await put(`triton/echo/${v}/model.py`, Buffer.from(ECHO_MODEL_PY));
    await put(`triton/echo/${v}/offset.json`, Buffer.from(JSON.stringify({ offset: Number(v) })));
    await put(`triton/echo/${v}/${WEIGHTS}`, randomBytes(5 * 1024 * 1024));
    const joblib = join(work, `iris-${v}.joblib`);
    await writeSklearnModel(joblib, Number(v));
    await put(`mlserver/iris/v${v}/model.joblib`, await readFile(joblib));
    const settings = {
      name: 'iris',
      implementation: 'mlserver_sklearn.SKLearnModel',
      parameters: { uri: './model.joblib', version: `v${v}` },
    };
    await put(`mlserver/iris/v${v}/model-settings.json`, Buffer.from(JSON.stringify(settings)));
    await put(`mlserver/iris/v${v}/${WEIGHTS}`, randomBytes(6 * 1024 * 1024));
  }
  dispatcher = new Agent();
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  for (const r of replicas) await r.stop();
  await dispatcher?.close();
  await origin?.close();
  await minio?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

// The Triton and MLServer suites share nothing but the network and the store (their own keys, servers and peers'
// tasks), and each waits for the real manager's reads of its preheat job: they run side by side, each suite's tests
// in order.
describe('Triton on two replicas through the real network', { concurrent: true }, () => {
  let pair: [Replica, Replica];
  const echo = subjectOf(TRITON, 'triton/echo', ECHO_FILES, {
    // A's registrations give the model's config (the registration's `config` option); B's server reads the
    // config.pbtxt beside the versions (as the example's init container copies it from a ConfigMap).
    options: (version, r) =>
      r === pair[0] ? { config: JSON.stringify(echoConfig([Number(version)], 1)) } : {},
    async inferOn(r, version) {
      const data = [1, 2];
      const answer = await infer(r.server, 'echo', { name: 'INPUT0', datatype: 'FP32', shape: [2], data });
      // The model adds its version's offset.
      expect(answer).toMatchObject({
        model_version: version,
        outputs: [{ data: data.map((d) => d + +version) }],
      });
    },
  });

  beforeAll(async () => {
    pair = await startPair('triton', startTriton);
    const b = pair[1];
    await mkdir(join(b.root, 'echo'));
    await writeFile(join(b.root, 'echo/config.pbtxt'), ECHO_CONFIG_PBTXT);
  }, 300_000);

  it.sequential(
    'registers version 1 on both: local hits on the preheated node, the data file from MinIO once for both, ready, inferred',
    async () => {
      await registerPreheated(echo, '1', pair, await preheatNode(echo, '1', pair[0].peer));
    },
  );

  it.sequential(
    'rolls to version 2 beside 1, drops 1 (its directory too), scales the instances',
    async () => {
      await rollOnBoth(echo, '1', '2', pair);

      const server = driverReplica(echo.driver, pair[0]);
      await server.scale('echo', '2', { min: 2, max: 2 }, {});
      expect(await server.describe('echo', '2', {})).toEqual({
        version: '2',
        minWorkers: 2,
        maxWorkers: 2,
        readyWorkers: 2,
      });
      const answer = await infer(pair[0].server, 'echo', {
        name: 'INPUT0',
        datatype: 'FP32',
        shape: [1],
        data: [5],
      });
      expect(answer).toMatchObject({ model_version: '2', outputs: [{ data: [7] }] });
    },
  );

  it.sequential('unregisters everything: nothing served, no version left on disk', async () => {
    await unregisterOnBoth(echo, '2', pair);
  });
});

describe('MLServer on two replicas through the real network', { concurrent: true }, () => {
  let pair: [Replica, Replica];
  const iris = subjectOf(MLSERVER, 'mlserver/iris', IRIS_FILES, {
    async inferOn(r, version) {
      const answer = await infer(r.server, 'iris', { name: 'x', datatype: 'FP64', shape: [1, 1], data: [3] });
      expect(answer.model_version).toBe(version);
      // vN is y = N * x.
      expect(answer.outputs[0]!.data[0]).toBeCloseTo(3 * Number(version.slice(1)), 6);
    },
  });

  beforeAll(async () => {
    pair = await startPair('mlserver', startMLServer);
  }, 300_000);

  it.sequential(
    'registers v1 on both: local hits on the preheated node, the data file from MinIO once for both, ready, inferred',
    async () => {
      const served = await registerPreheated(iris, 'v1', pair, await preheatNode(iris, 'v1', pair[0].peer));
      console.log(`MinIO served ${served[IRIS_FILES.indexOf(WEIGHTS)]} bytes of v1's ${WEIGHTS}`);
    },
  );

  it.sequential('rolls to v2 beside v1 and drops v1 (its directory too)', async () => {
    const served = await rollOnBoth(iris, 'v1', 'v2', pair);
    console.log(`MinIO served ${served[IRIS_FILES.indexOf(WEIGHTS)]} bytes of v2's ${WEIGHTS}`);
  });

  it.sequential('unregisters everything: nothing served, no version left on disk', async () => {
    await unregisterOnBoth(iris, 'v2', pair);
  });
});
