/**
 * vLLM (CPU) on the REAL Dragonfly network: two vLLM replicas on one node, each with its own `peerload agent`
 * process beside it and its own model root, both behind the node's peer daemon (dfdaemon 1.4.2); MinIO, behind a
 * counting proxy, holds the base model and the adapters, and the agents and `peerload fetch` sign their keys.
 *   - base weights before start: `peerload fetch` places the base model into each replica's root (the second a
 *     local hit of the node's peer), then vLLM starts on it; the driver's base-model mode reports it ready;
 *   - adapters at run time: the driver has the agent place each version and loads it on both replicas, every
 *     file read from the origin once; a completion through each replica with `model: <adapter>`;
 *   - a version change reloads in place (the completion changes), the old directory goes; deletion unloads.
 * Opt-in (`npm run test:vllm`): its set-up is scripts/setup-vllm.sh, about 6 GB.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelFiles, ReplicaAccess, ReplicaServer } from '../../src/servers/driver.ts';
import { VllmDriver } from '../../src/servers/vllm/driver.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { startDragonfly, type Dragonfly } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { freePort } from '../support/ports.ts';
import { startProcess, waitFor, type ManagedProcess } from '../support/process.ts';
import {
  fixtureFiles,
  startVllm,
  vllmSetup,
  type VllmOptions,
  type VllmServer,
  type VllmSetup,
} from '../support/vllm.ts';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
const BUCKET = 'llm';
const AGENT_TOKEN = 'vllm-suite-agent-token-0123456789';
const API_KEY = 'vllm-suite-api-key-0123456789';
const BASE_VERSION = 'v1';
const call = () => ({ signal: AbortSignal.timeout(300_000), timeoutMs: 120_000 });

interface Replica {
  ip: string;
  root: string;
  vllm: VllmServer;
  vllmOptions: VllmOptions;
  agent: ManagedProcess;
  server: ReplicaServer;
  fetchLine: string;
}

let setup: VllmSetup;
let network: Dragonfly;
let minio: MinIO;
let origin: CountingProxy;
let work: string;
let dispatcher: Agent;
let driver: VllmDriver;
const replicas: Replica[] = [];
let base: ModelFiles;

/** A port free on every one of `hosts` (each agent listens on its replica's address, at one port for all). */
async function commonPort(hosts: string[]): Promise<number> {
  for (;;) {
    const port = await freePort(hosts[0]);
    const free = await Promise.all(
      hosts.slice(1).map(
        (host) =>
          new Promise<boolean>((ok) => {
            const s = createServer();
            s.once('error', () => ok(false));
            s.listen(port, host, () => s.close(() => ok(true)));
          }),
      ),
    );
    if (free.every(Boolean)) return port;
  }
}

/** Uploads a fixture directory under `prefix` and returns its files as a spec (keys the agent signs). */
async function upload(dir: string, prefix: string): Promise<ModelFiles> {
  const files = [];
  for (const path of await fixtureFiles(dir)) {
    const body = await readFile(join(dir, path));
    await minio.putObject(BUCKET, `${prefix}/${path}`, body);
    files.push({ path, key: `${prefix}/${path}`, size: body.length });
  }
  return {
    storage: { ...minio.location(BUCKET), endpoint: origin.url, expiresSeconds: 3600 },
    files,
    tag: 'vllm-suite',
  };
}

/** Body bytes the origin sent for each key, over every request. */
function originBytes(): Record<string, number> {
  const bytes: Record<string, number> = {};
  for (const r of origin.requests) {
    const key = decodeURIComponent(new URL(r.url, 'http://x').pathname).replace(`/${BUCKET}/`, '');
    if (r.method === 'GET') bytes[key] = (bytes[key] ?? 0) + r.bytes;
  }
  return bytes;
}

/**
 * Every file of `spec` crossed from the origin once: its size, plus at most the 1-byte range request the peer
 * daemon sends the origin before each download through it, hit or not (`downloads` of them).
 */
function expectOneOriginRead(spec: ModelFiles, downloads: number): void {
  const bytes = originBytes();
  for (const f of spec.files) {
    expect(bytes[f.key!] ?? 0, f.key).toBeGreaterThanOrEqual(f.size!);
    expect(bytes[f.key!] ?? 0, f.key).toBeLessThanOrEqual(f.size! + downloads);
  }
}

async function cli(args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [join(REPO_ROOT, 'src/cli/main.ts'), ...args],
    {
      maxBuffer: 1 << 20,
    },
  );
  return stdout.trim();
}

async function complete(r: Replica, model: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${r.vllm.url}/v1/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'the model', max_tokens: 8, temperature: 0 }),
  });
  const body = (await res.json()) as { choices?: { text: string }[] };
  return { status: res.status, text: body.choices?.[0]?.text ?? '' };
}

async function models(r: Replica): Promise<{ id: string; root: string; parent: string | null }[]> {
  const res = await fetch(`${r.vllm.url}/v1/models`, { headers: { authorization: `Bearer ${API_KEY}` } });
  return ((await res.json()) as { data: { id: string; root: string; parent: string | null }[] }).data;
}

const register = (r: Replica, name: string, version: string, files?: ModelFiles) =>
  r.server.register({ fileName: `${name}/${version}`, modelName: name, version, files, options: {} }, call());

beforeAll(async () => {
  setup = await vllmSetup();
  work = await mkdtemp(join(tmpdir(), 'peerload-vllm-'));
  network = await startDragonfly({ nodePeers: 1 });
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  // Signed URLs name the counting proxy as the endpoint: MinIO verifies the signature over the same Host.
  origin = await startCountingProxy(minio.endpoint);
  dispatcher = new Agent();
  const secrets: Record<string, string> = { 'agent/token': AGENT_TOKEN, 'vllm/key': API_KEY };
  driver = new VllmDriver({
    secret: async (_ns, ref) => secrets[`${ref.name}/${ref.key}`] ?? '',
    dispatcher,
    agentPollMs: 200,
  });

  const creds = join(work, 'credentials');
  await mkdir(creds);
  await writeFile(join(creds, 'access_key'), minio.accessKey);
  await writeFile(join(creds, 'secret_key'), minio.secretKey);
  await writeFile(join(work, 'token'), AGENT_TOKEN);
  const baseSpec = join(work, 'base-spec.json');
  base = await upload(join(setup.fixtures, 'base'), `base/${BASE_VERSION}`);
  await writeFile(baseSpec, JSON.stringify({ ...base, version: BASE_VERSION }));

  const peer = network.peers[0]!;
  const start = 230 + Math.floor(Math.random() * 20);
  const ips = [`127.0.0.${start}`, `127.0.0.${start + 1}`];
  const agentPort = await commonPort(ips);
  // One after the other: a vLLM start takes both cores for about two minutes.
  for (const [i, ip] of ips.entries()) {
    const root = join(work, `node-${i}`, 'models'); // the daemon's file system: hard links work
    await mkdir(root, { recursive: true });
    const shared = [
      '--root',
      root,
      '--proxy',
      peer.proxyURL,
      '--hard-link-root',
      root,
      '--credentials-dir',
      creds,
    ];
    const fetchLine = await cli([
      'fetch',
      '--name',
      'llama',
      '--spec',
      baseSpec,
      '--min-free-bytes',
      '0',
      ...shared,
    ]);
    const agent = startProcess(
      `agent-${i}`,
      process.execPath,
      [
        join(REPO_ROOT, 'src/cli/main.ts'),
        'agent',
        '--address',
        `${ip}:${agentPort}`,
        '--token-file',
        join(work, 'token'),
        '--min-free-bytes',
        '0',
        ...shared,
      ],
      join(work, `agent-${i}.log`),
    );
    await waitFor(`agent ${i}`, async () => (await fetch(`http://${ip}:${agentPort}/healthz`)).ok, {
      timeoutMs: 30_000,
    });
    const vllmOptions: VllmOptions = {
      bin: setup.bin,
      model: join(root, 'llama', BASE_VERSION),
      servedName: 'llama',
      host: ip,
      port: await freePort(ip),
      logPath: join(work, `vllm-${i}.log`),
      apiKey: API_KEY,
    };
    const vllm = await startVllm(vllmOptions);
    const access: ReplicaAccess = {
      tokenSecretRef: { name: 'vllm', key: 'key' },
      agent: { port: agentPort, tokenSecretRef: { name: 'agent', key: 'token' }, root },
    };
    const server = driver.replica({ uid: 'u', namespace: 'ns' }, access, {
      endpoint: vllm.url,
      pod: `vllm-${i}`,
    });
    replicas.push({ ip, root, vllm, vllmOptions, agent, server, fetchLine });
  }
}, 3_600_000);

afterAll(async () => {
  for (const r of replicas) {
    await r.vllm.stop();
    await r.agent.stop(5_000);
  }
  await dispatcher?.close();
  await origin?.close();
  await minio?.stop();
  await network?.stop();
  if (work && !process.env['PEERLOAD_KEEP_VLLM']) await rm(work, { recursive: true, force: true });
}, 120_000);

describe('vLLM with the base model fetched before start and adapters placed at run time', () => {
  it('starts on the base model peerload fetch placed: one origin read per file, the second node copy a local hit', async () => {
    expect(replicas[0]!.fetchLine).toMatch(/^fetched llama version v1: \d+ files/);
    expect(replicas[1]!.fetchLine).toMatch(/\((\d+) local hits, \1 hard links\)$/);
    expect(replicas[1]!.fetchLine).toContain(`(${base.files.length} local hits`);
    expectOneOriginRead(base, replicas.length);
    for (const [i, r] of replicas.entries()) {
      // The base-model mode: nothing to load; ready from /v1/models and /health, the version its directory, and
      // whether the fetch was a local hit from the record the agent beside the server reads.
      expect(await register(r, 'llama', BASE_VERSION)).toEqual({ version: BASE_VERSION, localHit: i === 1 });
      expect(await r.server.describe('llama', undefined, call())).toMatchObject({
        version: BASE_VERSION,
        readyWorkers: 1,
      });
    }
  });

  it('loads an adapter on both replicas from one origin read per file, and completes through each', async () => {
    const sql = await upload(join(setup.fixtures, 'adapter-a-v1'), 'adapters/sql/v1');
    const first = await register(replicas[0]!, 'sql', 'v1', sql);
    const second = await register(replicas[1]!, 'sql', 'v1', sql);
    expect(first.version).toBe('v1');
    expect(second).toEqual({ version: 'v1', localHit: true });
    expectOneOriginRead(sql, replicas.length);
    const texts = [];
    for (const r of replicas) {
      const adapterFile = join(r.root, 'sql', 'v1', 'adapter_model.safetensors');
      expect((await stat(adapterFile)).size).toBeGreaterThan(0);
      const card = (await models(r)).find((m) => m.id === 'sql');
      expect(card).toMatchObject({ root: join(r.root, 'sql', 'v1'), parent: 'llama' });
      expect(await r.server.describe('sql', 'v1', call())).toMatchObject({ version: 'v1', readyWorkers: 1 });
      const out = await complete(r, 'sql');
      expect(out.status).toBe(200);
      texts.push(out.text);
    }
    // One adapter, one greedy completion: the same on both replicas, and not the base model's.
    expect(texts[1]).toBe(texts[0]);
    expect((await complete(replicas[0]!, 'llama')).text).not.toBe(texts[0]);
  });

  it('holds a second adapter beside the first, each its own model', async () => {
    const chat = await upload(join(setup.fixtures, 'adapter-b-v1'), 'adapters/chat/v1');
    for (const r of replicas) {
      await register(r, 'chat', 'v1', chat);
      const ids = (await models(r)).map((m) => m.id).sort();
      expect(ids).toEqual(['chat', 'llama', 'sql']);
      expect((await complete(r, 'chat')).status).toBe(200);
    }
    expect((await complete(replicas[0]!, 'chat')).text).not.toBe((await complete(replicas[0]!, 'sql')).text);
  });

  it('rolls an adapter to a new version in place, then removes the old directory', async () => {
    const before = await complete(replicas[0]!, 'sql');
    const v2 = await upload(join(setup.fixtures, 'adapter-a-v2'), 'adapters/sql/v2');
    for (const r of replicas) {
      expect((await register(r, 'sql', 'v2', v2)).version).toBe('v2');
      expect(await r.server.describe('sql', undefined, call())).toMatchObject({
        version: 'v2',
        readyWorkers: 1,
      });
      const after = await complete(r, 'sql');
      expect(after.status).toBe(200);
      expect(after.text).not.toBe(before.text);
      // What the controller does once the new version serves: remove every other version.
      const versions = (await r.server.versions('sql', call())).map((v) => [v.version, v.readyWorkers]);
      expect(versions).toEqual([
        ['v2', 1],
        ['v1', 0],
      ]);
      await r.server.unregister('sql', 'v1', call());
      expect(await readdir(join(r.root, 'sql'))).toEqual(['v2']);
    }
    expectOneOriginRead(v2, replicas.length);
  });

  it('unloads an adapter on deletion and removes its directories; the other adapter stays', async () => {
    for (const r of replicas) {
      await r.server.unregisterAll('sql', call());
      expect((await models(r)).map((m) => m.id).sort()).toEqual(['chat', 'llama']);
      expect((await complete(r, 'sql')).status).toBe(404);
      expect(await readdir(join(r.root, 'sql'))).toEqual([]);
      expect((await complete(r, 'chat')).status).toBe(200);
    }
  });

  it('loads the adapters again on a restarted replica, from the directory its agent kept', async () => {
    const r = replicas[1]!;
    const before = await complete(r, 'chat');
    const bytes = originBytes();
    await r.vllm.stop();
    r.vllm = await startVllm(r.vllmOptions);
    expect(await r.server.describe('chat', undefined, call())).toBeUndefined();
    const chat = await upload(join(setup.fixtures, 'adapter-b-v1'), 'adapters/chat/v1');
    expect((await register(r, 'chat', 'v1', chat)).version).toBe('v1');
    expect(await complete(r, 'chat')).toEqual(before);
    for (const f of chat.files) expect(originBytes()[f.key!]).toBe(bytes[f.key!]);
  });
});
