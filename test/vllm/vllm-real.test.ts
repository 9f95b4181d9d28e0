/**
 * vLLM (CPU) through its DRIVER on the REAL Dragonfly network: two vLLM replicas on one node, each with its own
 * `peerload agent` process beside it and its own model root, both behind the node's peer daemon (dfdaemon 1.4.2);
 * MinIO, behind a counting proxy, holds the base model and the adapters, and the agents and `peerload fetch` sign
 * their keys (test/support/vllm-node.ts).
 *   - base weights before start: `peerload fetch` places the base model into each replica's root (the second a
 *     local hit of the node's peer), then vLLM starts on it; the driver's base-model mode reports it ready;
 *   - adapters at run time: the driver has the agent place each version and loads it on both replicas, every
 *     file read from the origin once; a completion through each replica with `model: <adapter>`;
 *   - a version change reloads in place (the completion changes), the old directory goes; deletion unloads.
 * The same through the operator's ServedModels: vllm-operator.test.ts. Opt-in (`npm run test:vllm`): its set-up is
 * scripts/setup-vllm.sh, about 6 GB.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelFiles, ReplicaAccess, ReplicaServer } from '../../src/servers/driver.ts';
import { VllmDriver } from '../../src/servers/vllm/driver.ts';
import { startVllm } from '../support/vllm.ts';
import {
  AGENT_TOKEN,
  API_KEY,
  BASE_VERSION,
  complete,
  expectOneOriginRead as expectOneRead,
  models,
  startVllmNode,
  type NodeReplica,
  type VllmNode,
} from '../support/vllm-node.ts';

const call = () => ({ signal: AbortSignal.timeout(300_000), timeoutMs: 120_000 });

interface Replica extends NodeReplica {
  server: ReplicaServer;
}

let node: VllmNode;
let dispatcher: Agent;
let replicas: Replica[] = [];
let base: ModelFiles;

const upload = (dir: string, prefix: string) => node.upload(join(node.setup.fixtures, dir), prefix);
const originBytes = () => node.originBytes();
const expectOneOriginRead = (spec: ModelFiles, downloads: number) => expectOneRead(node, spec, downloads);
const register = (r: Replica, name: string, version: string, files?: ModelFiles) =>
  r.server.register({ fileName: `${name}/${version}`, modelName: name, version, files, options: {} }, call());

beforeAll(async () => {
  node = await startVllmNode();
  base = node.base;
  dispatcher = new Agent();
  const secrets: Record<string, string> = { 'agent/token': AGENT_TOKEN, 'vllm/key': API_KEY };
  const driver = new VllmDriver({
    secret: async (_ns, ref) => secrets[`${ref.name}/${ref.key}`] ?? '',
    dispatcher,
    agentPollMs: 200,
  });
  replicas = node.replicas.map((r, i) => {
    const access: ReplicaAccess = {
      tokenSecretRef: { name: 'vllm', key: 'key' },
      agent: { port: node.agentPort, tokenSecretRef: { name: 'agent', key: 'token' }, root: r.root },
    };
    const server = driver.replica({ uid: 'u', namespace: 'ns' }, access, {
      endpoint: r.vllm.url,
      pod: `vllm-${i}`,
    });
    // The same object: a restart below replaces r.vllm on the node's replica, which stop() ends.
    return Object.assign(r, { server });
  });
}, 3_600_000);

afterAll(async () => {
  await node?.stop();
  await dispatcher?.close();
}, 120_000);

describe('vLLM with the base model fetched before start and adapters placed at run time', () => {
  it('starts on the base model peerload fetch placed: one origin read per file, the second node copy a local hit', async () => {
    expect(replicas[0]!.fetchLine).toMatch(/^fetched llama version v1: \d+ files/);
    // vLLM runs as root here: its files are copies, never hard links of the daemon's (a root server could write one).
    expect(replicas[1]!.fetchLine).toMatch(/\([1-9]\d* local hits, 0 hard links\)$/);
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
    const sql = await upload('adapter-a-v1', 'adapters/sql/v1');
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
    const chat = await upload('adapter-b-v1', 'adapters/chat/v1');
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
    const v2 = await upload('adapter-a-v2', 'adapters/sql/v2');
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
    const chat = await upload('adapter-b-v1', 'adapters/chat/v1');
    expect((await register(r, 'chat', 'v1', chat)).version).toBe('v1');
    expect(await complete(r, 'chat')).toEqual(before);
    for (const f of chat.files) expect(originBytes()[f.key!]).toBe(bytes[f.key!]);
  });
});
