/**
 * The Triton and MLServer drivers (src/servers/oip/) against the OIP emulator (held to the real servers' answers by
 * oip-replay.test.ts) with a real `peerload agent` beside it, downloading from a plain origin through the peer-proxy
 * emulator into the emulator's model repository: registration (files placed, then load), progress and local hits,
 * versions and rollout, worker counts, unregistration, and how every failure reads.
 */
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../src/place/placer.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import type { ModelFiles, ReplicaAccess, ReplicaServer } from '../../src/servers/driver.ts';
import { modelServerDrivers } from '../../src/servers/index.ts';
import { MLSERVER, OipDriver, TRITON, type OipFlavour } from '../../src/servers/oip/driver.ts';
import { ReplicaError } from '../../src/servers/endpoint.ts';
import { startOipEmulator, type OipEmulator } from '../support/oip-emulator.ts';
import { ECHO_MODEL_PY, echoConfig } from '../support/oip-exchanges.ts';
import { startOrigin } from '../support/origin.ts';
import { acrossRestart, expectNoFlip } from '../support/restart.ts';
import { peerBed } from '../support/peer-bed.ts';

const TOKEN = 'oip-agent-token-0123456789abcdef';
const SECRET_IN_REASON = 'X-Amz-Signature=0123456789abcdef0123456789abcdef';
const settings = (version: string) =>
  JSON.stringify({
    name: 'iris',
    implementation: 'mlserver_sklearn.SKLearnModel',
    parameters: { uri: './model.joblib', version },
  });
const FILES: Record<string, string> = {
  '/m/echo/1/model.py': ECHO_MODEL_PY,
  '/m/echo/1/offset.json': '{"offset": 1}',
  '/m/echo/2/model.py': ECHO_MODEL_PY,
  '/m/echo/2/offset.json': '{"offset": 2}',
  '/m/iris/v1/model-settings.json': settings('v1'),
  '/m/iris/v1/model.joblib': 'joblib v1',
  '/m/iris/v2/model-settings.json': settings('v2'),
  '/m/iris/v2/model.joblib': 'joblib v2',
};

let dir: string;
let root: string;
let agent: AgentServer;
let emulator: OipEmulator;
let secretReads: { namespace: string; name: string; key: string }[];

const bed = peerBed('origin', () => startOrigin(FILES));

async function setUp(flavour: OipFlavour) {
  dir = await mkdtemp(join(tmpdir(), 'oip-driver-'));
  root = join(dir, 'models');
  await mkdir(root);
  await writeFile(join(dir, 'token'), TOKEN);
  bed.peer.reset();
  secretReads = [];
  agent = await startAgentServer({
    root,
    host: '127.0.0.1',
    proxy: bed.peer.url,
    dispatcher: bed.dispatcher,
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
    token: () => Promise.resolve(TOKEN),
  });
  emulator = await startOipEmulator(flavour, root);
}
afterEach(async () => {
  await agent.close();
  await emulator.close();
  await rm(dir, { recursive: true, force: true });
});

const files = (model: string, version: string, paths: string[], directory?: string): ModelFiles => ({
  files: paths.map((p) => ({ path: p, url: `${bed.origin.url}/m/${model}/${version}/${p}` })),
  ...(directory ? { directory } : {}),
});

function replica(
  flavour: OipFlavour,
  access: Partial<ReplicaAccess> = {},
): { driver: OipDriver; server: ReplicaServer } {
  const driver = new OipDriver(flavour, {
    secret: (namespace, ref) => {
      secretReads.push({ namespace, ...ref });
      return Promise.resolve(ref.key === 'wrong' ? 'not-the-token-abcdefgh' : TOKEN);
    },
    dispatcher: bed.dispatcher,
    placePollMs: 20,
  });
  const server = driver.replica(
    { uid: 'uid-1', namespace: 'ml' },
    { agent: { port: agent.port, tokenSecretRef: { name: 'agent-token', key: '{pod}' } }, ...access },
    { endpoint: emulator.url, pod: 'triton-0' },
  );
  return { driver, server };
}

async function failureOf(driver: OipDriver, p: Promise<unknown>) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  // The server's errors and the agent's are the replica endpoint's, as every directory driver's.
  expect(err).toBeInstanceOf(ReplicaError);
  return driver.failure(err)!;
}

const ECHO = ['model.py', 'offset.json'];
const IRIS = ['model-settings.json', 'model.joblib'];

/** The registration of `model`'s `version`, its files those of the origin's m/<model>/<version>/ directory. */
const registration = (
  model: string,
  version: string,
  paths: string[],
  options: Record<string, string> = {},
) => ({
  fileName: `m/${model}/${version}/`,
  modelName: model,
  version,
  files: files(model, version, paths),
  options,
});

describe('Triton', () => {
  beforeEach(() => setUp(TRITON));

  it('registers a version: the agent places its files, then a load; progress, versions, workers', async () => {
    const { server } = replica(TRITON);
    const progress: string[] = [];
    const reg = registration('echo', '1', ECHO);
    await writeFile(join(root, 'config.pbtxt'), 'not read: the model directory is echo/');
    await mkdir(join(root, 'echo'), { recursive: true });
    await writeFile(join(root, 'echo/config.pbtxt'), 'instance_group [ { count: 1, kind: KIND_CPU } ]\n');
    expect(await server.register(reg, { progress: (m) => progress.push(m) })).toEqual({
      version: '1',
      localHit: false,
    });
    // The first words are the layout's: the agent places a directory (no archive to download).
    expect(progress[0]).toBe('the agent places echo 1');
    expect(progress.at(-1)).toBe('loading echo 1');
    expect((await stat(join(root, 'echo/1/model.py'))).isFile()).toBe(true);
    expect(await server.describe('echo', undefined, {})).toEqual({
      version: '1',
      minWorkers: 1,
      maxWorkers: 1,
      readyWorkers: 1,
    });
    // The agent's token, from the Secret key named by the pod.
    expect(secretReads).toContainEqual({ namespace: 'ml', name: 'agent-token', key: 'triton-0' });
    expect(bed.peer.requests.map((r) => r.url).sort()).toEqual(
      ECHO.map((p) => `${bed.origin.url}/m/echo/1/${p}`).sort(),
    );

    await server.scale('echo', '1', { min: 1, max: 3 }, {});
    expect(emulator.configOf('echo')).toMatchObject({
      instance_group: [{ count: 3 }],
      version_policy: { specific: { versions: [1] } },
      parameters: { 'peerload.workers.min': { string_value: '1' } },
    });
    expect(await server.describe('echo', '1', {})).toEqual({
      version: '1',
      minWorkers: 1,
      maxWorkers: 3,
      readyWorkers: 3,
    });

    // Version 2 beside 1 (the scaled config kept), newest is the default; then 1 goes, files and all.
    await server.register(
      { ...reg, version: '2', fileName: 'm/echo/2/', files: files('echo', '2', ECHO) },
      {},
    );
    expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['1', '2']);
    expect(emulator.configOf('echo')).toMatchObject({
      instance_group: [{ count: 3 }],
      version_policy: { specific: { versions: [1, 2] } },
    });
    expect((await server.describe('echo', undefined, {}))?.version).toBe('2');
    await server.unregister('echo', '1', {});
    expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['2']);
    await expect(stat(join(root, 'echo/1'))).rejects.toThrow(/ENOENT/);

    await server.unregisterAll('echo', {});
    expect(await server.versions('echo', {})).toEqual([]);
    await expect(stat(join(root, 'echo/2'))).rejects.toThrow(/ENOENT/);
  });

  it('stages for a Staged rollout: places version 2 without loading it, loads it at the switch; refuses one below the served', async () => {
    const { driver, server } = replica(TRITON);
    await mkdir(join(root, 'echo'), { recursive: true });
    await writeFile(join(root, 'echo/config.pbtxt'), 'instance_group [ { count: 1, kind: KIND_CPU } ]\n');
    await server.register(registration('echo', '1', ECHO), {});
    const staging = server.staging!;
    const v2 = registration('echo', '2', ECHO);
    expect(await staging.place(v2, {})).toEqual({ version: '2', localHit: false });
    // Placed, not loaded: version 1 alone serves (and answers requests without a version).
    expect((await stat(join(root, 'echo/2/model.py'))).isFile()).toBe(true);
    expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['1']);
    expect((await staging.placed('echo', {})).sort()).toEqual(['1', '2']);
    // The switch: loaded beside 1, the newest serves.
    await staging.load('echo', '2', {});
    expect((await server.versions('echo', {})).map((v) => v.version)).toEqual(['1', '2']);
    expect(emulator.configOf('echo')).toMatchObject({ version_policy: { specific: { versions: [1, 2] } } });
    expect((await server.describe('echo', undefined, {}))?.version).toBe('2');
    // The rollback: 2 unregistered, 1 serves again, 2's files gone.
    await server.unregister('echo', '2', {});
    expect((await server.describe('echo', undefined, {}))?.version).toBe('1');
    await expect(stat(join(root, 'echo/2'))).rejects.toThrow(/ENOENT/);
    // Triton would go on serving a higher version: staging one below it is refused before anything is placed.
    await staging.load('echo', '1', {});
    await server.register(registration('echo', '2', ECHO), {});
    const below = await failureOf(driver, staging.place(registration('echo', '1', ECHO), {}));
    expect(below).toMatchObject({ kind: 'terminal', retryable: false });
    expect(below.message).toMatch(
      /2 is above 1: a Staged rollout needs a version numbered above the one served/,
    );
  });

  it("loads with the registration's config, and a preheated version is every file a local hit", async () => {
    const { server } = replica(TRITON);
    for (const p of ECHO) await bed.peer.preheat(`${bed.origin.url}/m/echo/1/${p}`);
    const originReads = bed.origin.stats.requests;
    const config = JSON.stringify(echoConfig([1], 2));
    const reg = registration('echo', '1', ECHO, { config });
    expect(await server.register(reg, {})).toEqual({ version: '1', localHit: true });
    expect(bed.origin.stats.requests).toBe(originReads);
    expect(emulator.configOf('echo')).toMatchObject({ backend: 'python', instance_group: [{ count: 2 }] });
  });

  it('reads every failure as a kind, redacted', async () => {
    const { driver, server } = replica(TRITON);
    const reg = registration('echo', '1', ECHO);
    // Placed where Triton does not look for echo: its "failed to poll from model repository" 500.
    const elsewhere = await failureOf(
      driver,
      server.register({ ...reg, files: files('echo', '1', ECHO, 'other') }, {}),
    );
    expect(elsewhere).toMatchObject({ kind: 'notFound', retryable: false });
    // Its text is not quoted (an endpoint may be any address): the status and our words.
    expect(elsewhere.message).toContain('HTTP 500');
    expect(elsewhere.message).not.toContain('failed to poll from model repository');
    // A model.py that raises: 400 with the traceback, terminal, nothing secret kept.
    emulator.failLoad('echo', `Internal: ValueError: cannot open https://bucket/w?${SECRET_IN_REASON}`);
    const raised = await failureOf(driver, server.register(reg, {}));
    expect(raised).toMatchObject({ kind: 'terminal', retryable: false });
    expect(raised.message).toContain('HTTP 400');
    expect(raised.message).not.toContain('ValueError');
    expect(raised.message).not.toContain('0123456789abcdef0123456789abcdef');
    // A server that is briefly down: retryable.
    emulator.failNext('/v2/repository/index', 503, 'unavailable');
    expect(await failureOf(driver, server.versions('echo', {}))).toMatchObject({
      kind: 'retryable',
      retryable: true,
    });
    // Triton versions are numbers; a directory model needs its files and the agent.
    expect(await failureOf(driver, server.register({ ...reg, version: 'v1' }, {}))).toMatchObject({
      kind: 'terminal',
    });
    expect(await failureOf(driver, server.register({ ...reg, files: undefined }, {}))).toMatchObject({
      kind: 'terminal',
    });
    const noAgent = replica(TRITON, { agent: undefined });
    const refused = await failureOf(driver, noAgent.server.register(reg, {}));
    expect(refused.message).toContain('peerload agent');
    // The agent refuses another token: auth.
    const wrong = replica(TRITON, {
      agent: { port: agent.port, tokenSecretRef: { name: 'agent-token', key: 'wrong' } },
    });
    expect(await failureOf(driver, wrong.server.register(reg, {}))).toMatchObject({ kind: 'auth' });
    // A config option that is not JSON names the option.
    const badConfig = await failureOf(driver, server.register({ ...reg, options: { config: '{' } }, {}));
    expect(badConfig).toMatchObject({ kind: 'terminal' });
    expect(badConfig.message).toContain('option config');
    expect(driver.failure(new Error('not the server'))).toBeUndefined();
  });
});

describe('MLServer', () => {
  beforeEach(() => setUp(MLSERVER));

  it('registers, rolls to v2 (v1 dropped by its directory going and a reload), refuses worker counts it cannot set', async () => {
    const { driver, server } = replica(MLSERVER);
    const reg = registration('iris', 'v1', IRIS);
    expect(await server.register(reg, {})).toEqual({ version: 'v1', localHit: false });
    expect(await server.describe('iris', undefined, {})).toEqual({
      version: 'v1',
      minWorkers: 1,
      maxWorkers: 1,
      readyWorkers: 1,
    });
    await server.scale('iris', 'v1', { min: 1, max: 1 }, {});
    const scaled = await failureOf(driver, server.scale('iris', 'v1', { min: 2, max: 2 }, {}));
    expect(scaled).toMatchObject({ kind: 'terminal' });
    expect(scaled.message).toContain('parallel_workers');

    await server.register({ ...reg, version: 'v2', files: files('iris', 'v2', IRIS) }, {});
    expect((await server.versions('iris', {})).map((v) => v.version)).toEqual(['v1', 'v2']);
    expect((await server.describe('iris', undefined, {}))?.version).toBe('v2');
    await server.unregister('iris', 'v1', {});
    expect((await server.versions('iris', {})).map((v) => v.version)).toEqual(['v2']);
    await server.unregisterAll('iris', {});
    expect(await server.versions('iris', {})).toEqual([]);
    await server.unregisterAll('iris', {}); // a model the server does not know: fine
  });

  it("reads MLServer's failures: 404 unknown, 422 a model file missing, a version its settings do not name", async () => {
    const { driver, server } = replica(MLSERVER);
    const reg = registration('iris', 'v1', IRIS);
    // model-settings.json left out: nothing names iris.
    const unknown = await failureOf(
      driver,
      server.register({ ...reg, files: files('iris', 'v1', ['model.joblib']) }, {}),
    );
    expect(unknown).toMatchObject({ kind: 'notFound' });
    expect(unknown.message).toContain('HTTP 404');
    expect(unknown.message).not.toContain('Model iris not found');
    const missing = await failureOf(
      driver,
      server.register({ ...reg, version: 'v2', files: files('iris', 'v2', ['model-settings.json']) }, {}),
    );
    expect(missing).toMatchObject({ kind: 'terminal' });
    expect(missing.message).not.toContain('InvalidModelURI');
    // Removed again: MLServer loads every version of a name, so it would fail every later load.
    await expect(stat(join(root, 'iris/v2'))).rejects.toThrow(/ENOENT/);
    // Files of v1 placed as version v3: its settings name v1, so v3 never serves.
    const named = await failureOf(driver, server.register({ ...reg, version: 'v3' }, {}));
    expect(named).toMatchObject({ kind: 'terminal' });
    expect(named.message).toContain('parameters.version');
  });
});

it('is registered beside TorchServe under its names', () => {
  const drivers = modelServerDrivers({ secret: () => Promise.resolve('') });
  expect(drivers.get(TRITON)).toBeInstanceOf(OipDriver);
  expect(drivers.get(MLSERVER).name).toBe('mlserver');
  expect(drivers.defaultName).toBe('torchserve');
});

it('loads directories only, and says what to set instead of an archive', () => {
  const driver = new OipDriver(TRITON, { secret: () => Promise.resolve('') });
  expect(driver.layouts).toEqual(['directory']);
  expect(driver.refuseLayout()).toMatch(/^Triton loads a model directory .* set spec\.files/);
});

describe('an operator restart', () => {
  const restart = (
    flavour: OipFlavour,
    modelName: string,
    version: string,
    paths: string[],
    workers: number,
  ) =>
    acrossRestart(replica(flavour).driver, replica(flavour).driver, {
      owner: { uid: 'uid-1', namespace: 'ml' },
      access: { agent: { port: agent.port, tokenSecretRef: { name: 'agent-token', key: '{pod}' } } },
      replica: { endpoint: emulator.url, pod: 'triton-0' },
      goal: {
        modelName,
        version,
        fileName: `m/${modelName}/${version}/`,
        files: files(modelName, version, paths),
        minWorkers: workers,
        maxWorkers: workers,
        options: {},
      },
    });

  it('keeps a Ready Triton replica Ready: its instance count is read back from the loaded config', async () => {
    await setUp(TRITON);
    await mkdir(join(root, 'echo'), { recursive: true });
    await writeFile(join(root, 'echo/config.pbtxt'), 'instance_group [ { count: 1, kind: KIND_CPU } ]\n');
    const r = await restart(TRITON, 'echo', '1', ECHO, 2);
    expectNoFlip(r);
    expect(r.outcome.status.readyWorkers).toBe(2);
    expect(emulator.configOf('echo')).toMatchObject({ instance_group: [{ count: 2 }] });
  });

  it('keeps a Ready MLServer replica Ready', async () => {
    await setUp(MLSERVER);
    const r = await restart(MLSERVER, 'iris', 'v1', IRIS, 1);
    expectNoFlip(r);
  });
});
