/**
 * Directory models on REAL OIP servers through the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon
 * 1.4.2: a seed peer and two node peers, each on its own 127.0.0.x address), from MinIO behind a counting proxy:
 *   - Triton 2.51.0 on two replicas, each with a real `peerload agent` beside it downloading through its node's peer
 *     (a replica listens on its node's address, as a pod's traffic reaches its node's daemon). A python-backend
 *     model (model.py, the offset it adds from offset.json, a 5 MiB data file) preheated into node A only: the
 *     driver registers it on both (A: every file a local hit, hard-linked; B: through the network), MinIO serves
 *     the data file once across both replicas (files up to dfdaemon's minimum piece length are fetched by each
 *     peer from the origin itself), both describe it ready and answer an inference (A loads with the registration's
 *     config option, B with the config.pbtxt beside the versions); version 2 rolls out, version 1
 *     goes (its directory too), the instance count scales, and unregistering leaves nothing;
 *   - MLServer 1.7.1 with a scikit-learn model (model-settings.json + model.joblib), version v1 then v2, on a
 *     replica whose agent downloads through node B's peer: registered, inferred, rolled, unregistered.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagerClient } from '../../src/manager/client.ts';
import type { ModelFiles, ReplicaServer } from '../../src/servers/driver.ts';
import { MLSERVER, OipDriver, TRITON } from '../../src/servers/oip/driver.ts';
import { effectiveFilter, type StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, startDragonfly, type Dragonfly, type DragonflyPeer } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY, echoConfig } from '../support/oip-exchanges.ts';
import { startMLServer, startTriton, writeSklearnModel, type OipServer } from '../support/oip-servers.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from '../support/oip-replicas.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/process.ts';

const TOKEN = 'oip-e2e-agent-token-0123456789';
const BUCKET = 'models';
const WEIGHTS: Record<string, Buffer> = {
  '1': randomBytes(5 * 1024 * 1024),
  '2': randomBytes(5 * 1024 * 1024),
};
const ECHO_FILES = ['model.py', 'offset.json', 'weights.bin'];
const IRIS_FILES = ['model-settings.json', 'model.joblib'];

type Replica = AgentReplica;

let network: Dragonfly;
let minio: MinIO;
let origin: CountingProxy;
let location: StorageLocation & { type: 's3' };
let dispatcher: Agent;
let work: string;
let agentPort: number;
const replicas: Replica[] = [];
/** Each object's size, by key. */
const sizes = new Map<string, number>();

async function put(key: string, body: Buffer): Promise<void> {
  await minio.putObject(BUCKET, key, body);
  sizes.set(key, body.length);
}

async function startReplica(
  peer: DragonflyPeer,
  label: string,
  start: typeof startTriton,
  port: number,
): Promise<Replica> {
  const replica = await startAgentReplica({
    peer,
    dir: join(work, label),
    port,
    token: TOKEN,
    credentials: minio,
    dispatcher,
    start,
  });
  replicas.push(replica);
  return replica;
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

/** Body bytes MinIO served for one key. */
const servedBytes = (key: string) => origin.bytesServed(`/${BUCKET}/${key}`);
/** Body bytes MinIO served for each file of a prefix, in ECHO_FILES / IRIS_FILES order. */
const reads = (prefix: string, paths: string[]) => paths.map((p) => servedBytes(`${prefix}/${p}`));

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
  before: number[],
  bounds: { crossings: number; smallCrossings: number; downloads: number },
): number[] {
  const now = reads(prefix, ECHO_FILES);
  ECHO_FILES.forEach((p, i) => {
    const size = sizes.get(`${prefix}/${p}`)!;
    const crossings = size > MIN_PIECE ? bounds.crossings : bounds.smallCrossings;
    expect(now[i]! - before[i]!, p).toBeLessThanOrEqual(crossings * size + bounds.downloads);
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

beforeAll(async () => {
  network = await startDragonfly({ nodePeers: 2 });
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  origin = await startCountingProxy(minio.endpoint);
  // Signed URLs name the counting proxy as the endpoint: MinIO verifies the signature over the same Host.
  location = { ...minio.location(BUCKET), endpoint: origin.url };
  work = await mkdtemp(join(tmpdir(), 'peerload-oip-e2e-'));
  for (const v of ['1', '2']) {
    await put(`triton/echo/${v}/model.py`, Buffer.from(ECHO_MODEL_PY));
    await put(`triton/echo/${v}/offset.json`, Buffer.from(JSON.stringify({ offset: Number(v) })));
    await put(`triton/echo/${v}/weights.bin`, WEIGHTS[v]!);
    const joblib = join(work, `iris-${v}.joblib`);
    await writeSklearnModel(joblib, Number(v));
    await put(`mlserver/iris/v${v}/model.joblib`, await readFile(joblib));
    const settings = {
      name: 'iris',
      implementation: 'mlserver_sklearn.SKLearnModel',
      parameters: { uri: './model.joblib', version: `v${v}` },
    };
    await put(`mlserver/iris/v${v}/model-settings.json`, Buffer.from(JSON.stringify(settings)));
  }
  dispatcher = new Agent();
  agentPort = await portOnAll(network.peers.map((p) => p.ip));
}, 1_800_000);

afterAll(async () => {
  for (const r of replicas) await r.stop();
  await dispatcher?.close();
  await origin?.close();
  await minio?.stop();
  await network?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('Triton on two replicas through the real network', () => {
  let a: Replica;
  let b: Replica;
  const driver = driverOf(TRITON);
  /**
   * A's registrations give the model's config (the registration's `config` option); B's server reads the
   * config.pbtxt beside the versions (as the example's init container copies it from a ConfigMap).
   */
  const registration = (version: string, r: Replica) => ({
    fileName: `triton/echo/${version}/`,
    modelName: 'echo',
    version,
    files: filesOf(`triton/echo/${version}`, ECHO_FILES),
    options: r === a ? { config: JSON.stringify(echoConfig([Number(version)], 1)) } : {},
  });

  beforeAll(async () => {
    a = await startReplica(network.peers[0]!, 'triton-a', startTriton, agentPort);
    b = await startReplica(network.peers[1]!, 'triton-b', startTriton, agentPort);
    await mkdir(join(b.root, 'echo'));
    await writeFile(join(b.root, 'echo/config.pbtxt'), ECHO_CONFIG_PBTXT);
  }, 300_000);

  it('registers version 1 on both: local hits on the preheated node, the data file from MinIO once for both, ready, inferred', async () => {
    // The preheat of node A's peer only (scope all_peers, its address), as a ModelPreheat targeting that node does.
    const manager = new ManagerClient({
      baseURL: network.managerURL,
      auth: { type: 'signIn', username: ROOT_USER.name, password: ROOT_USER.password },
    });
    const urls = [];
    for (const p of ECHO_FILES)
      urls.push(
        (await signObjectURL(location, `triton/echo/1/${p}`, minio.credentials(), { expiresSeconds: 600 }))
          .url,
      );
    const job = await manager.createPreheatJob({
      type: 'file',
      urls,
      filteredQueryParams: effectiveFilter(location),
      scope: 'all_peers',
      ips: [a.peer.ip],
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
    await manager.close();

    // The preheat brought every file across: the seed peer and node A (each at most once).
    const preheated = expectServed('triton/echo/1', [0, 0, 0], {
      crossings: 2,
      smallCrossings: 2,
      downloads: 2,
    });
    ECHO_FILES.forEach((p, i) =>
      expect(preheated[i], p).toBeGreaterThanOrEqual(sizes.get(`triton/echo/1/${p}`)!),
    );

    const progress: string[] = [];
    const onA = await driverReplica(driver, a).register(registration('1', a), {
      progress: (m) => progress.push(m),
    });
    expect(onA).toEqual({ version: '1', localHit: true });
    expect(progress).toContain('loading echo 1');
    // A's local hits read nothing from MinIO but the daemon's probes.
    const afterA = expectServed('triton/echo/1', preheated, {
      crossings: 0,
      smallCrossings: 0,
      downloads: 1,
    });
    const onB = await driverReplica(driver, b).register(registration('1', b), {});
    expect(onB).toEqual({ version: '1', localHit: false });
    // B's peer got the weights from the other peers: MinIO served them once in all, across both replicas.
    expectServed('triton/echo/1', afterA, { crossings: 0, smallCrossings: 1, downloads: 1 });

    for (const r of [a, b]) {
      expect(await driverReplica(driver, r).describe('echo', undefined, {})).toEqual({
        version: '1',
        minWorkers: 1,
        maxWorkers: 1,
        readyWorkers: 1,
      });
      expect(await readFile(join(r.root, 'echo/1/weights.bin'))).toEqual(WEIGHTS['1']);
      const answer = await infer(r.server, 'echo', {
        name: 'INPUT0',
        datatype: 'FP32',
        shape: [2],
        data: [1, 2],
      });
      expect(answer).toMatchObject({ model_version: '1', outputs: [{ data: [2, 3] }] });
    }
    // A's files are hard links of its daemon's copies: two names for one inode.
    expect((await stat(join(a.root, 'echo/1/weights.bin'))).nlink).toBeGreaterThanOrEqual(2);
  });

  it('rolls to version 2 beside 1, drops 1 (its directory too), scales the instances', async () => {
    let served = [0, 0, 0];
    for (const r of [a, b]) {
      const server = driverReplica(driver, r);
      expect(await server.register(registration('2', r), {})).toMatchObject({ version: '2' });
      // Not preheated: A's peer fetched it from MinIO (the seed peer may have at the same moment), B's from the
      // peers, and only the files up to a piece from MinIO again.
      served =
        r === a
          ? expectServed('triton/echo/2', served, { crossings: 2, smallCrossings: 2, downloads: 2 })
          : expectServed('triton/echo/2', served, { crossings: 0, smallCrossings: 1, downloads: 1 });
      expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['1', '2']);
      expect((await server.describe('echo', undefined, {}))?.version).toBe('2');
      const answer = await infer(r.server, 'echo', {
        name: 'INPUT0',
        datatype: 'FP32',
        shape: [1],
        data: [1],
      });
      expect(answer).toMatchObject({ model_version: '2', outputs: [{ data: [3] }] });
      await server.unregister('echo', '1', {});
      expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['2']);
      await expect(stat(join(r.root, 'echo/1'))).rejects.toThrow(/ENOENT/);
    }
    expect(served[2]).toBeGreaterThanOrEqual(WEIGHTS['2']!.length);

    const server = driverReplica(driver, a);
    await server.scale('echo', '2', { min: 2, max: 2 }, {});
    expect(await server.describe('echo', '2', {})).toEqual({
      version: '2',
      minWorkers: 2,
      maxWorkers: 2,
      readyWorkers: 2,
    });
    const answer = await infer(a.server, 'echo', { name: 'INPUT0', datatype: 'FP32', shape: [1], data: [5] });
    expect(answer).toMatchObject({ model_version: '2', outputs: [{ data: [7] }] });
  });

  it('unregisters everything: nothing served, no version left on disk', async () => {
    for (const r of [a, b]) {
      const server = driverReplica(driver, r);
      await server.unregisterAll('echo', {});
      expect(await server.versions('echo', {})).toEqual([]);
      await expect(stat(join(r.root, 'echo/2'))).rejects.toThrow(/ENOENT/);
    }
  });
});

describe('MLServer through the real network', () => {
  let r: Replica;
  const driver = driverOf(MLSERVER);
  const registration = (version: string) => ({
    fileName: `mlserver/iris/${version}/`,
    modelName: 'iris',
    version,
    files: filesOf(`mlserver/iris/${version}`, IRIS_FILES),
    options: {},
  });
  const x = { name: 'x', datatype: 'FP64', shape: [1, 1], data: [3] };

  beforeAll(async () => {
    // Another ServedModel: its own agent, on its own port.
    r = await startReplica(
      network.peers[1]!,
      'mlserver-b',
      startMLServer,
      await freePort(network.peers[1]!.ip),
    );
  }, 300_000);

  it('registers v1, rolls to v2, drops v1 and unregisters; each file from MinIO once', async () => {
    const server = driverReplica(driver, r);
    expect(await server.register(registration('v1'), {})).toEqual({ version: 'v1', localHit: false });
    expect(await server.describe('iris', undefined, {})).toEqual({
      version: 'v1',
      minWorkers: 1,
      maxWorkers: 1,
      readyWorkers: 1,
    });
    const one = await infer(r.server, 'iris', x);
    expect(one.model_version).toBe('v1');
    expect(one.outputs[0]!.data[0]).toBeCloseTo(3, 6);

    await server.register(registration('v2'), {});
    expect((await server.versions('iris', {})).map((v) => v.version)).toEqual(['v1', 'v2']);
    const two = await infer(r.server, 'iris', x);
    expect(two.model_version).toBe('v2');
    expect(two.outputs[0]!.data[0]).toBeCloseTo(6, 6);
    await server.unregister('iris', 'v1', {});
    expect((await server.versions('iris', {})).map((v) => v.version)).toEqual(['v2']);
    await expect(stat(join(r.root, 'iris/v1'))).rejects.toThrow(/ENOENT/);
    // One peer downloaded each file, once (both are below the minimum piece length).
    for (const v of ['v1', 'v2'])
      for (const p of IRIS_FILES) {
        const size = sizes.get(`mlserver/iris/${v}/${p}`)!;
        expect(servedBytes(`mlserver/iris/${v}/${p}`), `${v}/${p}`).toBeGreaterThanOrEqual(size);
        expect(servedBytes(`mlserver/iris/${v}/${p}`), `${v}/${p}`).toBeLessThanOrEqual(2 * size + 2);
      }
    await server.unregisterAll('iris', {});
    expect(await server.versions('iris', {})).toEqual([]);
  });
});
