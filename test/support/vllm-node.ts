/**
 * One node of the vLLM suite on the REAL Dragonfly network: the network (one node peer), MinIO behind a counting
 * proxy holding the base model, and vLLM replicas on that node, each on its own loopback address with its own
 * model root, a `peerload agent` process beside it and vLLM started on the base model `peerload fetch` placed
 * there (the second replica's fetch a local hit of the node's peer). One replica after the other: a vLLM start
 * takes both cores for about two minutes and about 2 GiB.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'vitest';
import type { ModelFiles } from '../../src/servers/driver.ts';
import { startCountingProxy, type CountingProxy } from './counting-proxy.ts';
import { startDragonfly, type Dragonfly, type DragonflyPeer } from './dragonfly.ts';
import { startMinIO, type MinIO } from './minio.ts';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';
import {
  fixtureFiles,
  startVllm,
  vllmSetup,
  type VllmOptions,
  type VllmServer,
  type VllmSetup,
} from './vllm.ts';

const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const BUCKET = 'llm';
export const AGENT_TOKEN = 'vllm-suite-agent-token-0123456789';
export const API_KEY = 'vllm-suite-api-key-0123456789';
export const BASE_NAME = 'llama';
export const BASE_VERSION = 'v1';

export interface NodeReplica {
  ip: string;
  /** The replica's model root on this machine (what its agent and fetch write). */
  root: string;
  vllm: VllmServer;
  vllmOptions: VllmOptions;
  agent: ManagedProcess;
  /** What `peerload fetch` printed when it placed the base model. */
  fetchLine: string;
}

export interface VllmNode {
  setup: VllmSetup;
  network: Dragonfly;
  /** The node's peer daemon: every agent and fetch downloads through it. */
  peer: DragonflyPeer;
  minio: MinIO;
  /** MinIO behind the counting proxy: the endpoint every signed URL names. */
  origin: CountingProxy;
  work: string;
  /** The agents' port, the same on every replica's address. */
  agentPort: number;
  /** Where vLLM sees its replica's root (with `mounted`: one path for all, as pods mount their volume). */
  modelsPath(r: NodeReplica): string;
  replicas: NodeReplica[];
  /** The base model's files, as fetch placed them. */
  base: ModelFiles;
  /** Uploads a fixture directory under `prefix`; its files as a spec (keys the agents sign). */
  upload(dir: string, prefix: string): Promise<ModelFiles>;
  /** Body bytes the origin sent for each key, over every request. */
  originBytes(): Record<string, number>;
  stop(): Promise<void>;
}

export interface VllmNodeOptions {
  /**
   * Each vLLM in a mount namespace of its own that shows its replica's root at one path for every replica, as a
   * pod's container sees its volume (a ServedModel names one `agent.root` for all its replicas). Default: each
   * vLLM sees its root where it is.
   */
  mounted?: boolean;
}

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

async function cli(args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [join(REPO_ROOT, 'src/cli/main.ts'), ...args],
    { maxBuffer: 1 << 20 },
  );
  return stdout.trim();
}

interface NodeContext {
  setup: VllmSetup;
  work: string;
  /** The storage credentials fetch and the agents sign with. */
  creds: string;
  /** The base model's spec for `peerload fetch`. */
  baseSpec: string;
  proxyURL: string;
  agentPort: number;
}

/**
 * Replica `i` on `ip`: fetch places the base model into its root, its agent starts, then vLLM on the base model;
 * with `mountPoint`, vLLM sees the root there.
 */
async function startReplica(
  ctx: NodeContext,
  i: number,
  ip: string,
  mountPoint: string | undefined,
): Promise<NodeReplica> {
  const root = join(ctx.work, `node-${i}`, 'models'); // the daemon's file system: hard links work
  await mkdir(root, { recursive: true });
  const shared = ['--root', root, '--proxy', ctx.proxyURL, '--hard-link-root', root];
  // The node's store (MinIO behind its origin proxy) listens on loopback: the pod owner's list names it.
  shared.push('--credentials-dir', ctx.creds, '--allowed-storage-hosts', 'http://127.0.0.0/8');
  const fetchLine = await cli([
    'fetch',
    ...['--name', BASE_NAME, '--spec', ctx.baseSpec, '--min-free-bytes', '0'],
    ...shared,
  ]);
  const address = `${ip}:${ctx.agentPort}`;
  const agentArgs = ['agent', '--address', address, '--token-file', join(ctx.work, 'token')];
  const agent = startProcess(
    `agent-${i}`,
    process.execPath,
    [join(REPO_ROOT, 'src/cli/main.ts'), ...agentArgs, '--min-free-bytes', '0', ...shared],
    join(ctx.work, `agent-${i}.log`),
  );
  const vllmOptions: VllmOptions = {
    bin: ctx.setup.bin,
    model: join(mountPoint ?? root, BASE_NAME, BASE_VERSION),
    servedName: BASE_NAME,
    host: ip,
    port: await freePort(ip),
    logPath: join(ctx.work, `vllm-${i}.log`),
    apiKey: API_KEY,
    ...(mountPoint ? { mount: { source: root, target: mountPoint } } : {}),
  };
  try {
    await waitFor(`agent ${i}`, async () => (await fetch(`http://${address}/healthz`)).ok, {
      timeoutMs: 30_000,
    });
    return { ip, root, vllm: await startVllm(vllmOptions), vllmOptions, agent, fetchLine };
  } catch (err) {
    await agent.stop(5_000);
    throw err;
  }
}

/** The network, MinIO and the counting proxy in front of it; what started is stopped when a later one fails. */
async function startServices(): Promise<{ network: Dragonfly; minio: MinIO; origin: CountingProxy }> {
  const network = await startDragonfly({ nodePeers: 1 });
  let minio: MinIO | undefined;
  try {
    minio = await startMinIO();
    await minio.createBucket(BUCKET);
    // Signed URLs name the counting proxy as the endpoint: MinIO verifies the signature over the same Host.
    return { network, minio, origin: await startCountingProxy(minio.endpoint) };
  } catch (err) {
    await minio?.stop().catch(() => undefined);
    await network.stop().catch(() => undefined);
    throw err;
  }
}

export async function startVllmNode(opts: VllmNodeOptions = {}): Promise<VllmNode> {
  const setup = await vllmSetup();
  const { network, minio, origin } = await startServices();
  const work = await mkdtemp(join(tmpdir(), 'peerload-vllm-'));
  const peer = network.peers[0]!;
  const mountPoint = join(work, 'mnt', 'models');
  const replicas: NodeReplica[] = [];

  const upload = async (dir: string, prefix: string): Promise<ModelFiles> => {
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
  };
  const originBytes = () => {
    const bytes: Record<string, number> = {};
    for (const r of origin.requests) {
      const key = decodeURIComponent(new URL(r.url, 'http://x').pathname).replace(`/${BUCKET}/`, '');
      if (r.method === 'GET') bytes[key] = (bytes[key] ?? 0) + r.bytes;
    }
    return bytes;
  };
  const stop = async () => {
    for (const r of replicas) {
      await r.vllm.stop();
      await r.agent.stop(5_000);
    }
    await origin.close();
    await minio.stop();
    await network.stop();
    if (!process.env['PEERLOAD_KEEP_VLLM']) await rm(work, { recursive: true, force: true });
  };

  try {
    const creds = join(work, 'credentials');
    await mkdir(creds);
    await mkdir(mountPoint, { recursive: true });
    await writeFile(join(creds, 'access_key'), minio.accessKey);
    await writeFile(join(creds, 'secret_key'), minio.secretKey);
    await writeFile(join(work, 'token'), AGENT_TOKEN);
    const baseSpec = join(work, 'base-spec.json');
    const base = await upload(join(setup.fixtures, 'base'), `base/${BASE_VERSION}`);
    await writeFile(baseSpec, JSON.stringify({ ...base, version: BASE_VERSION }));
    const start = 230 + Math.floor(Math.random() * 20);
    const ips = [`127.0.0.${start}`, `127.0.0.${start + 1}`];
    const agentPort = await commonPort(ips);
    const ctx = { setup, work, creds, baseSpec, proxyURL: peer.proxyURL, agentPort };
    // One after the other: a vLLM start takes both cores for about two minutes.
    for (const [i, ip] of ips.entries())
      replicas.push(await startReplica(ctx, i, ip, opts.mounted ? mountPoint : undefined));
    return {
      setup,
      network,
      peer,
      minio,
      origin,
      work,
      agentPort,
      modelsPath: (r) => (opts.mounted ? mountPoint : r.root),
      replicas,
      base,
      upload,
      originBytes,
      stop,
    };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}

/**
 * Every file of `spec` crossed from the origin once: its size, plus at most `probes` bytes (the 1-byte range
 * request the peer daemon sends the origin before each download through it, hit or not).
 */
export function expectOneOriginRead(node: VllmNode, spec: ModelFiles, probes: number): void {
  const bytes = node.originBytes();
  for (const f of spec.files) {
    expect(bytes[f.key!] ?? 0, f.key).toBeGreaterThanOrEqual(f.size!);
    expect(bytes[f.key!] ?? 0, f.key).toBeLessThanOrEqual(f.size! + probes);
  }
}

/** A greedy completion of 8 tokens through one replica, with `model` (the base model or an adapter). */
export async function complete(
  r: Pick<NodeReplica, 'vllm'>,
  model: string,
): Promise<{ status: number; text: string }> {
  const res = await fetch(`${r.vllm.url}/v1/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'the model', max_tokens: 8, temperature: 0 }),
  });
  const body = (await res.json()) as { choices?: { text: string }[] };
  return { status: res.status, text: body.choices?.[0]?.text ?? '' };
}

export interface ModelCard {
  id: string;
  root: string;
  parent: string | null;
}

/** What `/v1/models` lists on one replica. */
export async function models(r: Pick<NodeReplica, 'vllm'>): Promise<ModelCard[]> {
  const res = await fetch(`${r.vllm.url}/v1/models`, { headers: { authorization: `Bearer ${API_KEY}` } });
  return ((await res.json()) as { data: ModelCard[] }).data;
}
