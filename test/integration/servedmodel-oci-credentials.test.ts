/**
 * What a ServedModel's spec.source.oci sends to the agents, as each agent receives it (a recorder in front of the
 * real `peerload agent`, beside a Triton emulator), through the operator against the real apiserver:
 * - the REAL registry (Distribution v3, token auth): the agent's spec carries the registry's pull token once, in the
 *   `registry` header set every layer names, and neither the Secret's password nor a Basic credential;
 * - a registry that takes only Basic (in-process): refused with BasicAuthNotForwarded naming the admin's flag and
 *   nothing sent to the agent; one listed in --allowed-basic-auth-registry-hosts is placed, its credential once;
 * - an anonymous registry with a token service answering an 8 000-character token and 480 layers: the body the
 *   agent reads stays small (the token once, not 480 times); a 16 KiB token is refused (TokenTooLarge) before
 *   anything reaches an agent.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createRegistrySecret, createSecret } from '../support/kube.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import {
  modelManifest,
  pushModel,
  startFakeRegistry,
  type FakeRegistry,
  type LayerSpec,
} from '../support/oci-artifacts.ts';
import {
  portOnAll,
  startEmulatedReplicas,
  type EmulatedReplica,
  type EmulatedReplicas,
} from '../support/oip-replicas.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { TOKEN_SERVICE, startTokenServer, type TokenServer } from '../support/registry-token.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';

const AGENT_TOKEN = 'agent-token-oci-creds-0123';
const PASSWORD = 'alice-registry-password-credentials-91';
const IP = '127.0.0.93';
const RAW = 'application/vnd.cncf.model.weight.v1.raw';
const BIG_TOKEN = `big-${'t'.repeat(7996)}`;
const b64 = (s: string) => Buffer.from(s).toString('base64');

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns: string;
let work: string;
let tokens: TokenServer;
let registry: Registry;
/** Basic only, not listed; Basic only, listed; anonymous tokens of 8 000 characters; of 16 KiB (under the token answer's 64 KiB cap, over what an agent takes). */
let basicRefused: FakeRegistry;
let basicListed: FakeRegistry;
let bigToken: FakeRegistry;
let hugeToken: FakeRegistry;
let peer: PeerProxy;
let dispatcher: Agent;
let operator: RunningManager;
let manager: ManagerEmulator;
let agentPort: number;
let emulated: EmulatedReplicas;
let replica: EmulatedReplica;
let recorder: Server;
/** Every request the agent received: method, path and body. */
const received: { method: string; path: string; body: string }[] = [];

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('sm-oci-creds'));
  work = await mkdtemp(join(tmpdir(), 'peerload-sm-oci-creds-'));
  tokens = await startTokenServer({ users: { alice: PASSWORD } });
  registry = await startRegistry({ tokens });
  basicRefused = await startFakeRegistry();
  basicListed = await startFakeRegistry();
  bigToken = await startFakeRegistry();
  hugeToken = await startFakeRegistry();
  for (const r of [basicRefused, basicListed]) r.basic = { username: 'robot', password: PASSWORD };
  bigToken.bearer = { token: BIG_TOKEN, expiresIn: 300 };
  hugeToken.bearer = { token: 'h'.repeat(16 * 1024) };
  await createRegistrySecret(kc, ns, 'registry', {
    [registry.host]: `alice:${PASSWORD}`,
    [basicRefused.host]: `robot:${PASSWORD}`,
    [basicListed.host]: `robot:${PASSWORD}`,
  });
  await createSecret(kc, ns, 'agent-token', { token: AGENT_TOKEN });
  peer = await startPeerProxy();
  dispatcher = new Agent();
  agentPort = await portOnAll([IP]);
  // The agent listens on a port of its own; the recorder in front of it on the one the ServedModel names.
  emulated = await startEmulatedReplicas({
    ips: [IP],
    dir: work,
    token: AGENT_TOKEN,
    proxy: peer.url,
    dispatcher,
    port: await portOnAll([IP]),
  });
  replica = emulated.replicas[0]!;
  recorder = await startRecorder(IP, agentPort, `http://${IP}:${emulated.port}`);
  manager = await startManagerEmulator({ peer });
  operator = await startManager(
    kc,
    [
      ...soloOperatorFlags(),
      '--manager-url',
      manager.url,
      '--allowed-endpoint-hosts',
      '127.0.0.0/8',
      '--allowed-registry-hosts',
      'http://127.0.0.1',
      // This one registry's Basic credentials may go to the agents; the other Basic-only one is refused.
      '--allowed-basic-auth-registry-hosts',
      `http://${basicListed.host}`,
    ],
    [modelPreheatController, (ctx) => createServedModelController(ctx, {})],
  );
}, 300_000);

afterAll(async () => {
  await operator?.stop();
  if (recorder) {
    recorder.closeAllConnections();
    await new Promise((r) => recorder.close(r));
  }
  await emulated?.close();
  await dispatcher?.close();
  await manager?.close();
  await peer?.close();
  for (const r of [basicRefused, basicListed, bigToken, hugeToken]) await r?.close();
  await registry?.stop();
  await tokens?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

/** Forwards every request to the agent, keeping what it received (bodies are the operator's, at most 16 MiB). */
async function startRecorder(host: string, port: number, target: string): Promise<Server> {
  const s = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      received.push({ method: req.method!, path: req.url!, body: body.toString('utf8') });
      const headers = { ...req.headers };
      delete headers['host'];
      delete headers['connection'];
      delete headers['transfer-encoding'];
      request(`${target}${req.url}`, {
        dispatcher,
        method: req.method as 'GET',
        headers: headers as Record<string, string>,
        body: body.length > 0 ? body : undefined,
      }).then(
        async (answer) => {
          const text = await answer.body.text();
          res.writeHead(answer.statusCode, { 'content-type': 'application/json' }).end(text);
        },
        () => res.writeHead(502).end(),
      );
    });
  });
  await new Promise<void>((r) => s.listen(port, host, r));
  return s;
}

/** The PUT bodies the agent received for model `name`. */
const puts = (name: string) =>
  received.filter((q) => q.method === 'PUT' && q.path === `/v1/models/${name}`).map((q) => q.body);

/** Pushes a ModelPack artifact to the real registry as alice (the token service's push flow). */
async function pushToRegistry(repo: string, tag: string, layers: LayerSpec[]): Promise<void> {
  const realm = new URL(tokens.realm);
  realm.searchParams.set('service', TOKEN_SERVICE);
  realm.searchParams.set('scope', `repository:${repo}:pull,push`);
  const t = (await (
    await fetch(realm, { headers: { authorization: `Basic ${b64(`alice:${PASSWORD}`)}` } })
  ).json()) as { token: string };
  const authorization = `Bearer ${t.token}`;
  const { body, blobs } = modelManifest(layers);
  for (const [digest, content] of blobs) {
    const start = await fetch(`${registry.url}/v2/${repo}/blobs/uploads/`, {
      method: 'POST',
      headers: { authorization },
    });
    expect(start.status).toBe(202);
    const at = new URL(start.headers.get('location')!, registry.url);
    at.searchParams.set('digest', digest);
    const put = await fetch(at, {
      method: 'PUT',
      headers: { authorization, 'content-type': 'application/octet-stream' },
      body: content,
    });
    expect(put.status).toBe(201);
  }
  const m = await fetch(`${registry.url}/v2/${repo}/manifests/${tag}`, {
    method: 'PUT',
    headers: { authorization, 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
    body,
  });
  expect(m.status).toBe(201);
}

const create = (name: string, reference: string, withCredentials: boolean) =>
  sms.createServedModel(name, {
    modelName: name,
    version: '1',
    source: {
      oci: {
        reference,
        plainHTTP: true,
        ...(withCredentials ? { credentialsSecretRef: { name: 'registry' } } : {}),
      },
    },
    modelServer: {
      driver: 'triton',
      endpoints: [replica.server.url],
      agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
    },
  });

async function ready(name: string): Promise<ServedModel> {
  return sms.untilServedModel(
    name,
    'Ready 1/1',
    (o) => o.status?.ready === '1/1' && conditionOf(o, 'Ready')?.status === 'True',
    { timeoutMs: 120_000, intervalMs: 300 },
  );
}

async function stalled(name: string, reason: string): Promise<string> {
  const o = await sms.untilStalled(name, { reason, timeoutMs: 60_000, intervalMs: 300 });
  return conditionOf(o, 'Stalled')!.message!;
}

interface ReceivedSpec {
  headerSets?: Record<string, Record<string, string>>;
  files: { path: string; headerSet?: string; headers?: Record<string, string> }[];
}

describe("what the agent receives for a registry's credentials", () => {
  it("the real registry's pull token, once in the spec, scoped to the repository; no password, no Basic", async () => {
    const weights = Buffer.from('private weights '.repeat(500));
    await pushToRegistry('models/private', 'v1', [
      { mediaType: RAW, content: weights, filepath: '1/weights.bin' },
      { mediaType: RAW, content: Buffer.from('name: "private"\n'), filepath: 'config.pbtxt' },
    ]);
    const before = tokens.requests.length;
    await create('private', `${registry.host}/models/private:v1`, true);
    await ready('private');
    expect(await readFile(join(replica.root, 'private', '1', '1', 'weights.bin'))).toEqual(weights);
    const [body] = puts('private');
    const spec = JSON.parse(body!) as ReceivedSpec;
    const authorization = spec.headerSets?.['registry']?.['authorization'];
    expect(authorization).toMatch(/^Bearer [\w-]+\.[\w-]+\.[\w-]+$/);
    expect(spec.files.map((f) => [f.headerSet, f.headers])).toEqual([
      ['registry', undefined],
      ['registry', undefined],
    ]);
    expect(body!.split(authorization!.slice('Bearer '.length))).toHaveLength(2);
    expect(body).not.toContain(PASSWORD);
    expect(body).not.toMatch(/Basic /);
    // The operator asked the token service for pulling this repository only.
    expect(tokens.requests.slice(before).map((r) => [r.user, r.scope, r.status])).toContainEqual([
      'alice',
      'repository:models/private:pull',
      200,
    ]);
  });

  it('a registry that takes only Basic: refused, nothing sent to the agent, unless the admin lists it', async () => {
    const layer = [{ mediaType: RAW, content: Buffer.from('basic weights'), filepath: 'w.bin' }];
    pushModel(basicRefused, 'models/basic', 'v1', layer);
    pushModel(basicListed, 'models/basic', 'v1', layer);
    await create('refused', `${basicRefused.host}/models/basic:v1`, true);
    expect(await stalled('refused', 'BasicAuthNotForwarded')).toBe(
      `spec.source.oci.reference: the registry ${basicRefused.host} takes only Basic credentials (its challenge names no token service), so the agents would get the Secret's user and password, which the node daemons write into their logs: use a registry with a token service, or an admin who accepts that lists ${basicRefused.host} in --allowed-basic-auth-registry-hosts`,
    );
    expect(puts('refused')).toEqual([]);
    await create('listed', `${basicListed.host}/models/basic:v1`, true);
    await ready('listed');
    const [body] = puts('listed');
    const spec = JSON.parse(body!) as ReceivedSpec;
    expect(spec.headerSets).toEqual({ registry: { authorization: `Basic ${b64(`robot:${PASSWORD}`)}` } });
    expect(body!.split(b64(`robot:${PASSWORD}`))).toHaveLength(2);
    expect(basicListed.requests.filter((q) => q.path.includes('/blobs/') && q.status === 200)).toHaveLength(
      1,
    );
  });

  it('480 layers and an 8 000-character token: a small body, the token once; a 16 KiB token refused before any agent', async () => {
    const layers = Array.from({ length: 480 }, (_, i) => ({
      mediaType: RAW,
      content: Buffer.from(`layer ${i}`),
      filepath: `parts/p${i}.bin`,
    }));
    pushModel(bigToken, 'models/many', 'v1', layers);
    await create('many', `${bigToken.host}/models/many:v1`, false);
    await ready('many');
    const [body] = puts('many');
    // 480 copies of the token were 3.8 MB; once, the body is the files' own few hundred bytes each.
    expect(Buffer.byteLength(body!)).toBeLessThan(256 * 1024);
    expect(body!.split(BIG_TOKEN)).toHaveLength(2);
    const spec = JSON.parse(body!) as ReceivedSpec;
    expect(spec.files).toHaveLength(480);
    expect(spec.files.every((f) => f.headerSet === 'registry' && f.headers === undefined)).toBe(true);
    pushModel(hugeToken, 'models/many', 'v1', layers.slice(0, 3));
    await create('huge', `${hugeToken.host}/models/many:v1`, false);
    expect(await stalled('huge', 'TokenTooLarge')).toMatch(
      /^spec\.source\.oci\.reference: the token service of 127\.0\.0\.1:\d+ sent a token of 16384 characters for .*, above the 8185 a request header \(and an agent\) takes/,
    );
    expect(puts('huge')).toEqual([]);
  });
});
