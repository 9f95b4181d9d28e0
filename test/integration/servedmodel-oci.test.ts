/**
 * A ServedModel whose model is an OCI artifact (spec.source.oci), through the operator against the real apiserver:
 * the REAL registry (Distribution v3, token auth) with an artifact modctl pushed, two replicas each a Triton
 * emulator with a real `peerload agent` beside it (through the peer-proxy emulator), the real Triton driver.
 * - Ready 2/2: status.source holds the manifest digest, each replica's version directory holds every layer's file
 *   with the layer's digest, the tar layer extracted; each blob read from the registry once.
 * - A moved tag changes nothing until peerload.io/refresh-source or the spec changes; then the new digest rolls.
 * - Bad inputs (in-process registry for the artifacts no tool would push): not ModelPack, 401, 404, a registry not
 *   allowed (its Secret never read), a blob that is not its digest and an escaping tar entry: the condition or the
 *   replica's status names the reason and the layer, and nothing is placed.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { registryCredentialTag } from '../../src/storage/credential-tag.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import { parseReference } from '../../src/oci/reference.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { createRegistrySecret, createSecret, waitFor } from '../support/kube.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { modctl, pushTritonVersion, type Modctl } from '../support/modctl.ts';
import {
  gzip,
  pushModel,
  sha256,
  startFakeRegistry,
  tarOf,
  type FakeRegistry,
} from '../support/oci-artifacts.ts';
import {
  startEmulatedReplicas,
  type EmulatedReplica,
  type EmulatedReplicas,
} from '../support/oip-replicas.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startTokenServer, type TokenServer } from '../support/registry-token.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';

const TOKEN = 'agent-token-oci-0123456789';
const PASSWORD = 'alice-registry-password-77';
const IPS = ['127.0.0.71', '127.0.0.72'];
const CODE = 'def execute(requests):\n    return requests\n';
const WEIGHTS: Record<string, Buffer> = { '1': randomBytes(200_000), '2': randomBytes(150_000) };

let kc: k8s.KubeConfig;
let ns: string;
let sms: PeerloadNamespace;
let work: string;
let tokens: TokenServer;
let registry: Registry;
let fake: FakeRegistry;
let m: Modctl;
let peer: PeerProxy;
let dispatcher: Agent;
let operator: RunningManager;
let manager: ManagerEmulator;
let agentPort: number;
let emulated: EmulatedReplicas;
let replicas: EmulatedReplica[] = [];

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('sm-oci'));
  work = await mkdtemp(join(tmpdir(), 'peerload-sm-oci-'));
  tokens = await startTokenServer({ users: { alice: PASSWORD } });
  registry = await startRegistry({ tokens });
  fake = await startFakeRegistry();
  m = await modctl(join(work, 'modctl'));
  await m(
    ['login', '-u', 'alice', '-p', PASSWORD, '--password-stdin=false', '--plain-http', registry.host],
    work,
  );
  await push('1');
  await createRegistrySecret(kc, ns, 'registry', { [registry.host]: `alice:${PASSWORD}` });
  await createSecret(kc, ns, 'agent-token', { token: TOKEN });
  peer = await startPeerProxy();
  dispatcher = new Agent();
  emulated = await startEmulatedReplicas({ ips: IPS, dir: work, token: TOKEN, proxy: peer.url, dispatcher });
  ({ port: agentPort, replicas } = emulated);
  for (const r of replicas) await mkdir(join(r.root, 'echo'));
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
    ],
    [modelPreheatController, (ctx) => createServedModelController(ctx, {})],
  );
}, 300_000);

afterAll(async () => {
  await operator?.stop();
  await emulated?.close();
  await dispatcher?.close();
  await manager?.close();
  await peer?.close();
  await fake?.close();
  await registry?.stop();
  await tokens?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

/** Pushes version `v` of the echo model as models/echo:v1 (the same tag each time: a moved tag). */
const push = (v: string) =>
  pushTritonVersion(m, join(work, `src-${v}`), `${registry.host}/models/echo:v1`, {
    weights: WEIGHTS[v]!,
    offset: JSON.stringify({ offset: Number(v) }),
    code: CODE,
  });

const get = (name: string) => sms.getServedModel(name);
const create = (name: string, spec: Record<string, unknown>) => sms.createServedModel(name, spec);
const patch = (name: string, body: Record<string, unknown>) => sms.patchServedModel(name, body);

const endpoints = () => replicas.map((r) => r.server.url);

function spec(modelName: string, reference: string, extra: Record<string, unknown> = {}) {
  return {
    modelName,
    version: '1',
    source: { oci: { reference, plainHTTP: true, ...extra } },
    modelServer: {
      driver: 'triton',
      endpoints: endpoints(),
      agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
    },
  };
}

async function readyAt(name: string, version: string): Promise<ServedModel> {
  return sms.untilServedModel(
    name,
    `Ready 2/2 at version ${version}`,
    (o) =>
      o.status?.ready === '2/2' &&
      o.status.observedGeneration === o.metadata.generation &&
      conditionOf(o, 'Ready')?.status === 'True' &&
      !!o.status.replicas?.every((r) => r.version === version),
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

async function stalled(name: string, reason: string): Promise<string> {
  const o = await sms.untilStalled(name, { reason, timeoutMs: 60_000, intervalMs: 300 });
  return conditionOf(o, 'Stalled')!.message!;
}

const fileDigest = async (path: string) =>
  `sha256:${createHash('sha256')
    .update(await readFile(path))
    .digest('hex')}`;

/** The manifest of models/echo:v1 now, read from the registry with alice's token. */
async function manifestNow(): Promise<{
  digest: string;
  layers: { digest: string; annotations?: Record<string, string>; mediaType: string }[];
}> {
  const client = new RegistryClient(registry.host, {
    dispatcher,
    plainHTTP: true,
    credentials: { username: 'alice', password: PASSWORD },
    allowedHosts: parseHostRules('http://127.0.0.1'),
  });
  const got = await client.manifest(parseReference(`${registry.host}/models/echo:v1`));
  return { digest: got.digest, ...JSON.parse(got.body.toString('utf8')) };
}

describe('a ServedModel from a modctl-pushed artifact on the real registry', () => {
  it('is Ready 2/2: every layer placed with its digest, the tar layer extracted, each blob read from the registry once', async () => {
    const before = await manifestNow();
    await create(
      'echo',
      spec('echo', `${registry.host}/models/echo:v1`, { credentialsSecretRef: { name: 'registry' } }),
    );
    const o = await readyAt('echo', '1');
    expect(o.status!.source).toMatchObject({
      oci: { reference: `${registry.host}/models/echo:v1`, digest: before.digest },
      observedGeneration: o.metadata.generation,
      layers: 3,
    });
    for (const r of replicas) {
      const dir = join(r.root, 'echo', '1');
      expect((await readdir(dir)).sort()).toEqual(['model.py', 'offset.json', 'weights.bin']);
      expect(await readFile(join(dir, 'weights.bin'))).toEqual(WEIGHTS['1']);
      expect(await readFile(join(dir, 'model.py'), 'utf8')).toBe(CODE);
      // Each raw layer's file has the layer's digest.
      for (const l of before.layers.filter((l) => l.mediaType.endsWith('.raw'))) {
        const path = l.annotations!['org.cnai.model.filepath'] ?? l.annotations!['org.cncf.model.filepath']!;
        expect(await fileDigest(join(dir, path))).toBe(l.digest);
      }
      // The agent's report per layer: the tar layer unpacked one file.
      const v = r.agent.versions.get('echo')!.get('1')!;
      expect(v.files.map((f) => [f.path.startsWith('sha256-') ? 'tar' : f.path, f.extracted ?? 0])).toEqual(
        expect.arrayContaining([
          ['weights.bin', 0],
          ['offset.json', 0],
          ['tar', 1],
        ]),
      );
    }
    expect(
      before.layers.filter((l) => /^application\/vnd\.cncf\.model\.[a-z.]+\.v1\.tar$/.test(l.mediaType)),
    ).toHaveLength(1);
    // Both replicas behind the one peer proxy emulating the node's daemon: each blob crossed to the registry once.
    const blobs = peer.requests.filter((q) => q.url.includes('/blobs/sha256:'));
    expect(blobs).toHaveLength(6);
    // A private artifact: every blob's task carries the registry credentials' tag (never the bearer token's), so
    // the agents name the tasks only a holder of alice's password can name.
    const tag = registryCredentialTag(`http://${registry.host}`, 'models/echo', {
      username: 'alice',
      password: PASSWORD,
    });
    expect(blobs.map((q) => q.headers['x-dragonfly-tag'])).toEqual(blobs.map(() => tag));
    const tagged = new Set(blobs.map((q) => taskID({ url: q.url, tag, rule: '1.4' })));
    for (const r of replicas)
      for (const f of r.agent.versions.get('echo')!.get('1')!.files) {
        expect(f.taskID, f.path).toBe(f.expectedTaskID);
        expect(tagged.has(f.taskID!), f.path).toBe(true);
      }
    expect(new Set(blobs.map((q) => q.url)).size).toBe(3);
    expect(peer.stats.originRequests).toBe(3);
  });

  it('a moved tag changes nothing until peerload.io/refresh-source or the spec changes; the new digest then rolls out', async () => {
    const first = (await get('echo')).status!.source!.oci!.digest;
    await push('2');
    const moved = await manifestNow();
    expect(moved.digest).not.toBe(first);
    // A pass for another reason (a label) does not read the tag again.
    await patch('echo', { metadata: { labels: { poke: '1' } } });
    await new Promise((r) => setTimeout(r, 2_000));
    let o = await get('echo');
    expect(o.status!.source!.oci!.digest).toBe(first);
    expect(o.status!.ready).toBe('2/2');
    // The annotation resolves the tag again: status says the new digest.
    await patch('echo', { metadata: { annotations: { 'peerload.io/refresh-source': 'r1' } } });
    o = (await waitFor('the refreshed digest', async () => {
      const x = await get('echo');
      return x.status?.source?.oci?.digest === moved.digest ? x : undefined;
    }))!;
    expect(o.status!.source!.refresh).toBe('r1');
    // A new version of the spec places it: version 2 holds the new weights on both replicas, version 1 goes.
    await patch('echo', { spec: { version: '2' } });
    await readyAt('echo', '2');
    for (const r of replicas) {
      expect(await readFile(join(r.root, 'echo', '2', 'weights.bin'))).toEqual(WEIGHTS['2']);
      await waitFor('version 1 removed', async () =>
        (await readdir(join(r.root, 'echo'))).includes('1') ? undefined : true,
      );
    }
  });
});

describe('preheat.create with a source', () => {
  it("preheats the layers' blobs as files: status.tasks are the agents' task ids, every download then a local hit", async () => {
    const weights = randomBytes(100_000);
    const code = gzip(tarOf([{ path: 'model.py', body: CODE }]));
    pushModel(fake, 'models/warm', 'v1', [
      { mediaType: 'application/vnd.cncf.model.weight.v1.raw', content: weights, filepath: 'weights.bin' },
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: code, filepath: 'model.py' },
    ]);
    const blobURLs = [weights, code].map((c) => `${fake.url}/v2/models/warm/blobs/${sha256(c)}`);
    const before = fake.requests.filter((q) => q.path.includes('/blobs/')).length;
    await create('warm', { ...spec('warm', `${fake.host}/models/warm:v1`), preheat: { create: true } });
    await readyAt('warm', '1');
    const p = await sms.getModelPreheat('warm-preheat');
    expect(p.spec).toMatchObject({ type: 'file', urls: blobURLs });
    expect(p.status?.state).toBe('SUCCESS');
    // An anonymous artifact keeps no tag: its tasks are shared by every tenant that pulls it.
    expect(p.status?.tasks).toEqual(blobURLs.map((url) => ({ url, taskID: taskID({ url }) })));
    for (const r of replicas) {
      const v = r.agent.versions.get('warm')!.get('1')!;
      expect(v.files.map((f) => f.taskID)).toEqual(p.status!.tasks!.map((t) => t.taskID));
      expect(v.localHits).toBe(2);
      expect(await readFile(join(r.root, 'warm', '1', 'weights.bin'))).toEqual(weights);
      expect(await readFile(join(r.root, 'warm', '1', 'model.py'), 'utf8')).toBe(CODE);
    }
    // The registry served each blob once: to the preheat.
    expect(fake.requests.filter((q) => q.path.includes('/blobs/')).length - before).toBe(2);
  });

  it("a ModelPreheat of spec.source.oci plans the same job: SUCCESS, status.source the digest, the agents' task ids", async () => {
    const weights = randomBytes(80_000);
    const digest = pushModel(fake, 'models/alone', 'v1', [
      { mediaType: 'application/vnd.cncf.model.weight.v1.raw', content: weights, filepath: 'weights.bin' },
    ]);
    const url = `${fake.url}/v2/models/alone/blobs/${sha256(weights)}`;
    const before = fake.requests.filter((q) => q.path.includes('/blobs/')).length;
    await sms.createModelPreheat('alone', {
      source: { oci: { reference: `${fake.host}/models/alone:v1`, plainHTTP: true } },
    });
    const p = await sms.untilModelPreheat('alone', 'SUCCESS', (o) => o.status?.state === 'SUCCESS');
    expect(p.status?.source).toMatchObject({
      observedGeneration: 1,
      oci: { reference: `${fake.host}/models/alone:v1`, digest },
      files: 1,
      preheated: 1,
    });
    // The spec keeps its source: the job's URLs live in status only.
    expect(p.spec).not.toHaveProperty('urls');
    expect(p.status?.tasks).toEqual([{ url, taskID: taskID({ url }) }]);
    expect(fake.requests.filter((q) => q.path.includes('/blobs/')).length - before).toBe(1);
  });
});

describe('bad inputs: a clear condition or replica status naming the layer, and nothing placed', () => {
  /** No model directory of `name` on any replica, and nothing waiting beside it. */
  async function nothingPlaced(name: string) {
    for (const r of replicas) expect(await readdir(join(r.root, name)).catch(() => [])).toEqual([]);
  }

  it('401 without credentials, 404 for an unknown tag, a registry with credentials not allowed (its Secret never read)', async () => {
    await create('anon', spec('anon', `${registry.host}/models/echo:v1`));
    expect(await stalled('anon', 'Unauthorized')).toMatch(
      /^spec\.source\.oci\.reference: the registry .* requires credentials|refused an anonymous pull/,
    );
    await create(
      'missing',
      spec('missing', `${registry.host}/models/echo:nope`, { credentialsSecretRef: { name: 'registry' } }),
    );
    expect(await stalled('missing', 'NotFound')).toContain('has no manifest');
    const secretReads = () => operator.requests.filter((q) => q.path.includes('/secrets/absent')).length;
    await create(
      'elsewhere',
      spec('elsewhere', 'registry.example.com/models/echo:v1', { credentialsSecretRef: { name: 'absent' } }),
    );
    expect(await stalled('elsewhere', 'RegistryNotAllowed')).toContain(
      "registry registry.example.com is not in the operator's --allowed-registry-hosts (http://127.0.0.1), so the credentials of spec.source.oci.credentialsSecretRef are not read nor sent",
    );
    expect(secretReads()).toBe(0);
    for (const n of ['anon', 'missing', 'elsewhere']) await nothingPlaced(n);
  });

  it('a manifest that is not ModelPack, and an unknown layer type, naming the layer', async () => {
    const image = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: {
          mediaType: 'application/vnd.oci.image.config.v1+json',
          digest: sha256(Buffer.from('{}')),
          size: 2,
        },
        layers: [],
      }),
    );
    fake.putManifest('models/image', 'v1', image);
    await create('image', spec('image', `${fake.host}/models/image:v1`));
    expect(await stalled('image', 'NotModelPack')).toContain('is not a ModelPack model');
    pushModel(fake, 'models/odd', 'v1', [
      { mediaType: 'application/vnd.example.weights', content: Buffer.from('w'), filepath: 'w' },
    ]);
    await create('odd', spec('odd', `${fake.host}/models/odd:v1`));
    expect(await stalled('odd', 'UnknownMediaType')).toMatch(
      /layer 0 \(sha256:[0-9a-f]{12}, w\) of .* has media type application\/vnd\.example\.weights/,
    );
    for (const n of ['image', 'odd']) await nothingPlaced(n);
  });

  it('a blob that is not its digest, and a tar entry escaping the directory: each replica says which layer', async () => {
    const good = {
      mediaType: 'application/vnd.cncf.model.weight.v1.raw',
      content: Buffer.from('good weights'),
      filepath: 'w.bin',
    };
    const real = Buffer.from('the real bytes');
    pushModel(fake, 'models/tampered', 'v1', [
      good,
      { mediaType: 'application/vnd.cncf.model.weight.v1.raw', content: real, filepath: 'b.bin' },
    ]);
    fake.putWrongBlob('models/tampered', sha256(real), Buffer.from('other  bytes!!'));
    const escape = gzip(tarOf([{ path: '../../escaped.txt', body: 'x' }]));
    pushModel(fake, 'models/escape', 'v1', [
      good,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: escape, filepath: 'code' },
    ]);
    // Both replicas at once (no seed first), so each says it.
    const rollout = { rollout: { seedFirst: false } };
    await create('tampered', { ...spec('tampered', `${fake.host}/models/tampered:v1`), ...rollout });
    await create('escape', { ...spec('escape', `${fake.host}/models/escape:v1`), ...rollout });
    const failing = async (name: string, pattern: RegExp) =>
      waitFor(
        `${name}'s replicas say which layer`,
        async () => {
          const o = await get(name);
          const rs = o.status?.replicas ?? [];
          return rs.length === 2 && rs.every((r) => pattern.test(r.message ?? '')) ? o : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 300 },
      );
    const t = await failing('tampered', /layer 1 \(sha256:[0-9a-f]{12}, b\.bin\): its bytes hash to sha256/);
    expect(t!.status!.ready).toBe('0/2');
    await failing(
      'escape',
      /layer 1 \(sha256:[0-9a-f]{12}, code\): the tar entry "\.\.\/\.\.\/escaped\.txt" is refused/,
    );
    for (const n of ['tampered', 'escape']) await nothingPlaced(n);
    for (const r of replicas) expect(await readdir(join(r.root, '..'))).not.toContain('escaped.txt');
  });
});
