/**
 * A ServedModel's spec.source.oci as the operator resolves it (oci-source.ts), against the in-process registry of
 * test/support/oci-artifacts.ts: the files the agents get (each blob's URL, digest, path or archive, the registry's
 * Authorization), the digest kept per generation and refresh value (a moved tag changes nothing; status pins it
 * across a restart), every bad input as a reason and a message naming the field and the layer, and the owned
 * preheat of a source (the manager's image preheat of the manifest by digest).
 */
import { Agent } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  ModelPreheatSpec,
  ServedModelSpec,
  ownedPreheatSpec,
  type ServedModel,
} from '../../src/api/index.ts';
import { AUTHORIZATION_TTL_MS, OciSources, ociPreheat, type SourceFiles } from '../../src/sources/oci.ts';
import { goalOf, registrationVersion } from '../../src/controllers/servedmodel/goal.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { newProgress } from '../../src/place/placer.ts';
import { planPreheat } from '../../src/controllers/modelpreheat/request.ts';
import type { SecretReader } from '../../src/controllers/secrets.ts';
import { sourceOwner } from '../../src/sources/index.ts';
import type { EgressLookup } from '../../src/http/egress.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import {
  gzip,
  pushModel,
  sha256,
  startFakeRegistry,
  tarOf,
  type FakeRegistry,
} from '../support/oci-artifacts.ts';

/** The kind as the ServedModel controller asks it: by the object's key, owner and spec.source.oci. */
class ServedModelOciSources extends OciSources {
  of(key: string, sm: ServedModel, spec: ServedModelSpec) {
    return this.files({ ...sourceOwner(sm), key }, spec.source!.oci!, 'spec.source.oci');
  }
}

const RAW = 'application/vnd.cncf.model.weight.v1.raw';
const b64 = (s: string) => Buffer.from(s).toString('base64');

let registry: FakeRegistry;
let dispatcher: Agent;
beforeAll(async () => {
  registry = await startFakeRegistry();
  dispatcher = new Agent();
});
afterAll(async () => {
  await registry.close();
  await dispatcher.close();
});
beforeEach(() => {
  registry.failPaths.clear();
  registry.basic = undefined;
  registry.bearer = undefined;
  registry.requests.length = 0;
  registry.tokenRequests.length = 0;
});

const weights = Buffer.from('weights of version 1');
const code = gzip(tarOf([{ path: '1/model.py', body: 'x = 1\n' }]));
const layers = [
  { mediaType: RAW, content: weights, filepath: '1/model.onnx' },
  {
    mediaType: 'application/vnd.cnai.model.weight.config.v1.raw',
    content: Buffer.from('cfg'),
    filepath: 'config.pbtxt',
    legacy: true,
  },
  { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: code, filepath: '1/model.py' },
];

function spec(reference: string, extra: Record<string, unknown> = {}) {
  return ServedModelSpec.parse({
    modelName: 'simple',
    version: '1',
    source: { oci: { reference, plainHTTP: true, ...extra } },
    modelServer: {
      service: { name: 'triton' },
      driver: 'triton',
      agent: { port: 8200, tokenSecretRef: { name: 'agent', key: 'token' } },
    },
  });
}

function sm(s: ServedModelSpec, meta: Partial<ServedModel['metadata']> = {}, status?: ServedModel['status']) {
  return {
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ServedModel',
    metadata: { name: 'simple', namespace: 'ns', uid: 'u1', generation: 1, ...meta },
    spec: s,
    ...(status ? { status } : {}),
  } as ServedModel;
}

function sources(
  opts: {
    secrets?: Record<string, Record<string, string>>;
    maxManifestBytes?: number;
    now?: () => number;
    basicAuthRegistryHosts?: string;
    registryHosts?: string;
    lookup?: EgressLookup;
  } = {},
) {
  return new ServedModelOciSources({
    secretData: async (_ns, name) => {
      const data = opts.secrets?.[name];
      if (!data)
        throw Object.assign(new Error(`Secret ns/${name} not found`), { name: 'SecretNotFoundError' });
      return data;
    },
    dispatcher,
    registryHosts: parseHostRules(opts.registryHosts ?? `http://${registry.host}`),
    lookup: opts.lookup,
    basicAuthRegistryHosts:
      opts.basicAuthRegistryHosts !== undefined ? parseHostRules(opts.basicAuthRegistryHosts) : undefined,
    maxManifestBytes: opts.maxManifestBytes,
    now: opts.now,
  });
}

const ok = (r: SourceFiles): Extract<SourceFiles, { ok: true }> => {
  if (!r.ok) throw new Error(`not resolved: ${r.reason}: ${r.message}`);
  return r;
};
const refused = (r: SourceFiles) => {
  if (r.ok) throw new Error('resolved');
  return r;
};

describe('resolving spec.source.oci', () => {
  it('gives the agents each blob by its registry URL with its digest: raw layers on their path, tar layers to extract', async () => {
    const digest = pushModel(registry, 'models/simple', 'v1', layers);
    const s = spec(`${registry.host}/models/simple:v1`);
    const r = ok(await sources().of('ns/simple', sm(s), s));
    expect(r.digest).toBe(digest);
    expect(r.status).toEqual({
      oci: { reference: s.source!.oci!.reference, digest },
      observedGeneration: 1,
      layers: 3,
      bytes: weights.length + 3 + code.length,
    });
    const blob = (c: Buffer) => `${registry.url}/v2/models/simple/blobs/${sha256(c)}`;
    expect(r.files.files).toEqual([
      {
        path: '1/model.onnx',
        url: blob(weights),
        size: weights.length,
        sha256: sha256(weights).slice(7),
        layer: `layer 0 (${sha256(weights).slice(0, 19)}, 1/model.onnx)`,
      },
      {
        path: 'config.pbtxt',
        url: blob(Buffer.from('cfg')),
        size: 3,
        sha256: sha256(Buffer.from('cfg')).slice(7),
        layer: expect.stringMatching(/^layer 1 \(sha256:[0-9a-f]{12}, config\.pbtxt\)$/),
      },
      {
        path: `sha256-${sha256(code).slice(7)}`,
        url: blob(code),
        size: code.length,
        sha256: sha256(code).slice(7),
        layer: expect.stringMatching(/^layer 2 /),
        extract: 'tar+gzip',
      },
    ]);
    // What the driver sends is a valid agent spec, and the manifest digest is the registration's identity.
    expect(ModelVersionSpecSchema.safeParse({ ...r.files, version: '1' }).success).toBe(true);
    expect(registrationVersion(goalOf(s, r))).toBe(`1|${s.source!.oci!.reference}|${digest}`);
    expect(r.manifestURL).toBe(`${registry.url}/v2/models/simple/manifests/${digest}`);
    expect(r.blobURLs).toHaveLength(3);
  });

  it('hands spec.source.oci.maxBytes to the agents, which alone see what the tar layers unpack to', async () => {
    pushModel(registry, 'models/simple', 'v1', layers);
    const capped = spec(`${registry.host}/models/simple:v1`, { maxBytes: 5_000_000 });
    const r = ok(await sources().of('ns/capped', sm(capped), capped));
    expect(r.files.maxBytes).toBe(5_000_000);
    expect(ModelVersionSpecSchema.parse({ ...r.files, version: '1' }).maxBytes).toBe(5_000_000);
    const open = spec(`${registry.host}/models/simple:v1`);
    expect('maxBytes' in ok(await sources().of('ns/open', sm(open), open)).files).toBe(false);
  });

  it('a moved tag changes nothing for the generation; the annotation or a new generation resolves again; status pins the digest across a restart', async () => {
    const first = pushModel(registry, 'models/moving', 'v1', [layers[0]!]);
    const s = spec(`${registry.host}/models/moving:v1`);
    const src = sources();
    const r1 = ok(await src.of('ns/m', sm(s), s));
    expect(r1.digest).toBe(first);
    const second = pushModel(registry, 'models/moving', 'v1', [
      { ...layers[0]!, content: Buffer.from('version 2') },
    ]);
    expect(second).not.toBe(first);
    expect(ok(await src.of('ns/m', sm(s), s)).digest).toBe(first);
    // After a restart (nothing kept in memory) the digest status recorded for the generation is read by digest.
    const status = { source: r1.status };
    registry.requests.length = 0;
    expect(ok(await sources().of('ns/m', sm(s, {}, status), s)).digest).toBe(first);
    expect(registry.requests.filter((q) => q.path.includes('/manifests/')).map((q) => q.path)).toEqual([
      `/v2/models/moving/manifests/${first}`,
    ]);
    // The annotation with a new value resolves the tag again, and so does a new generation.
    const annotated = { annotations: { 'peerload.io/refresh-source': 'now' } };
    const r2 = ok(await src.of('ns/m', sm(s, annotated, status), s));
    expect(r2.digest).toBe(second);
    expect(r2.status.refresh).toBe('now');
    expect(ok(await sources().of('ns/m', sm(s, { generation: 2 }, status), s)).digest).toBe(second);
    // A digest reference is used as it is.
    const pinned = spec(`${registry.host}/models/moving@${first}`);
    expect(ok(await sources().of('ns/p', sm(pinned), pinned)).digest).toBe(first);
  });

  it('credentials buy a pull token of the repository; the agents get the token once, never the Secret, asked again at half its life', async () => {
    pushModel(registry, 'models/private', 'v1', layers);
    registry.basic = { username: 'robot', password: 'pw-registry-secret' };
    registry.bearer = { token: 'short-lived-pull-token', expiresIn: 40 };
    const config = JSON.stringify({ auths: { [registry.host]: { auth: b64('robot:pw-registry-secret') } } });
    let now = 1_000_000;
    const src = sources({ secrets: { registry: { '.dockerconfigjson': b64(config) } }, now: () => now });
    const s = spec(`${registry.host}/models/private:v1`, { credentialsSecretRef: { name: 'registry' } });
    const r = ok(await src.of('ns/p', sm(s), s));
    const basic = `Basic ${b64('robot:pw-registry-secret')}`;
    // The token service got the credentials and was asked for pulling this repository only.
    expect(registry.tokenRequests).toEqual([
      { scope: 'repository:models/private:pull', authorization: basic },
    ]);
    // The agents' spec: the token once, each file naming its set; no Basic, no password anywhere in it.
    expect(r.files.headerSets).toEqual({ registry: { authorization: 'Bearer short-lived-pull-token' } });
    expect(r.files.files.map((f) => [f.headerSet, f.headers])).toEqual(
      layers.map(() => ['registry', undefined]),
    );
    const body = JSON.stringify(r.files);
    expect(body.split('short-lived-pull-token')).toHaveLength(2);
    expect(body).not.toContain('pw-registry-secret');
    expect(body).not.toContain(b64('robot:pw-registry-secret'));
    expect(ModelVersionSpecSchema.safeParse({ ...r.files, version: '1' }).success).toBe(true);
    // Kept while the token has half its 40 s left; then read again by digest (the tag is not read).
    const reads = registry.requests.length;
    now += 19_000;
    await src.of('ns/p', sm(s), s);
    expect(registry.requests.length).toBe(reads);
    now += 2_000;
    expect(ok(await src.of('ns/p', sm(s), s)).digest).toBe(r.digest);
    expect(registry.tokenRequests).toHaveLength(2);
    expect(registry.requests.slice(reads).some((q) => q.path.endsWith(`/manifests/${r.digest}`))).toBe(true);
    expect(registry.requests.slice(reads).some((q) => q.path.endsWith('/manifests/v1'))).toBe(false);
    // A token that says nothing of its lifetime (60 s by the distribution spec) or a long one: asked again after
    // AUTHORIZATION_TTL_MS at the latest.
    registry.bearer = { token: 'long-lived-pull-token', expiresIn: 3600 };
    now += AUTHORIZATION_TTL_MS + 1;
    await src.of('ns/p', sm(s), s);
    const t = registry.tokenRequests.length;
    now += AUTHORIZATION_TTL_MS - 1;
    await src.of('ns/p', sm(s), s);
    expect(registry.tokenRequests).toHaveLength(t);
    now += 2;
    expect(ok(await src.of('ns/p', sm(s), s)).files.headerSets).toEqual({
      registry: { authorization: 'Bearer long-lived-pull-token' },
    });
    // A username/password Secret works the same way.
    const plain = sources({
      secrets: { registry: { username: b64('robot\n'), password: b64('pw-registry-secret') } },
    });
    expect(ok(await plain.of('ns/p', sm(s), s)).files.headerSets).toEqual({
      registry: { authorization: 'Bearer long-lived-pull-token' },
    });
  });

  it('a registry that takes only Basic is refused (its password would reach every node) unless the admin lists it', async () => {
    pushModel(registry, 'models/basic', 'v1', [layers[0]!]);
    registry.basic = { username: 'robot', password: 'pw-registry-secret' };
    const secrets = { registry: { username: b64('robot'), password: b64('pw-registry-secret') } };
    const s = spec(`${registry.host}/models/basic:v1`, { credentialsSecretRef: { name: 'registry' } });
    const r = refused(await sources({ secrets }).of('ns/b', sm(s), s));
    expect(r).toMatchObject({ reason: 'BasicAuthNotForwarded', final: true });
    expect(r.message).toBe(
      `spec.source.oci.reference: the registry ${registry.host} takes only Basic credentials (its challenge names no token service), so the agents would get the Secret's user and password, which the node daemons write into their logs: use a registry with a token service, or an admin who accepts that lists ${registry.host} in --allowed-basic-auth-registry-hosts`,
    );
    expect(r.message).not.toContain('pw-registry-secret');
    // Another registry listed changes nothing; this one listed: its credentials go, once.
    expect(
      refused(await sources({ secrets, basicAuthRegistryHosts: 'registry.example.com' }).of('ns/b', sm(s), s))
        .reason,
    ).toBe('BasicAuthNotForwarded');
    const allowed = ok(
      await sources({ secrets, basicAuthRegistryHosts: `http://${registry.host}` }).of('ns/b', sm(s), s),
    );
    expect(allowed.files.headerSets).toEqual({
      registry: { authorization: `Basic ${b64('robot:pw-registry-secret')}` },
    });
  });

  it('an anonymous token service answering a token larger than an agent takes: TokenTooLarge, nothing built per file', async () => {
    pushModel(registry, 'models/huge-token', 'v1', layers);
    registry.bearer = { token: 't'.repeat(16 * 1024) };
    const s = spec(`${registry.host}/models/huge-token:v1`);
    const r = refused(await sources().of('ns/h', sm(s), s));
    // Refused before the operator sent it anywhere: the registry saw the challenge, not the token.
    expect(registry.requests.some((q) => (q.authorization?.length ?? 0) > 1024)).toBe(false);
    expect(r).toMatchObject({ reason: 'TokenTooLarge', final: true });
    expect(r.message).toMatch(
      /^spec\.source\.oci\.reference: the token service of .* sent a token of 16384 characters for .*, above the 8185 a request header \(and an agent\) takes/,
    );
  });
});

describe('bad input: a reason, a message naming the field and the layer, and the retry it deserves', () => {
  it('an anonymous registry at an internal address the admin does not list: refused before it is asked', async () => {
    pushModel(registry, 'models/inside', 'v1', layers);
    const before = registry.requests.length;
    const s = spec(`${registry.host}/models/inside:v1`);
    expect(await sources({ registryHosts: 'registry.example.com' }).of('k', sm(s), s)).toEqual({
      ok: false,
      final: true,
      reason: 'RegistryNotAllowed',
      message: `spec.source.oci.reference: the registry 127.0.0.1 is a loopback address: a source without credentials reaches public addresses only; an admin lists http://${registry.host} in --allowed-registry-hosts to allow it`,
    });
    // A name of the tenant's that resolves into the cluster (a Service's address).
    const cluster: EgressLookup = (_h, _o, cb) => cb(null, [{ address: '10.96.0.1', family: 4 }]);
    const named = spec('registry.tenant.example/models/inside:v1');
    expect(
      await sources({ registryHosts: 'registry.example.com', lookup: cluster }).of('k2', sm(named), named),
    ).toMatchObject({
      reason: 'RegistryNotAllowed',
      message: expect.stringContaining('registry.tenant.example at 10.96.0.1 is a private address'),
    });
    expect(registry.requests.length).toBe(before);
  });

  it('not ModelPack, an unknown layer type, a raw layer without a path', async () => {
    const dockerImage = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
        config: {},
        layers: [],
      }),
    );
    registry.putManifest(
      'models/image',
      'v1',
      dockerImage,
      'application/vnd.docker.distribution.manifest.v2+json',
    );
    const image = spec(`${registry.host}/models/image:v1`);
    expect(refused(await sources().of('k', sm(image), image))).toMatchObject({
      reason: 'NotModelPack',
      final: true,
      message: expect.stringMatching(
        /^spec\.source\.oci\.reference: .*is a Docker image manifest, not a ModelPack model manifest/,
      ),
    });
    pushModel(registry, 'models/unknown', 'v1', [
      layers[0]!,
      { mediaType: 'application/vnd.oci.image.layer.v1.tar', content: Buffer.from('x'), filepath: 'x' },
    ]);
    const unknown = spec(`${registry.host}/models/unknown:v1`);
    expect(refused(await sources().of('k', sm(unknown), unknown))).toMatchObject({
      reason: 'UnknownMediaType',
      final: true,
      message: expect.stringMatching(
        /layer 1 \(sha256:[0-9a-f]{12}, x\) of .* has media type application\/vnd\.oci\.image\.layer\.v1\.tar, which is not a ModelPack layer/,
      ),
    });
    pushModel(registry, 'models/nopath', 'v1', [{ mediaType: RAW, content: Buffer.from('w') }]);
    const nopath = spec(`${registry.host}/models/nopath:v1`);
    expect(refused(await sources().of('k', sm(nopath), nopath))).toMatchObject({
      reason: 'InvalidLayer',
      message: expect.stringContaining('is a raw layer without the org.cncf.model.filepath annotation'),
    });
    pushModel(registry, 'models/noartifact', 'v1', [layers[0]!], {
      artifactType: 'application/vnd.example.thing',
      configType: 'application/vnd.oci.image.config.v1+json',
    });
    const other = spec(`${registry.host}/models/noartifact:v1`);
    expect(refused(await sources().of('k', sm(other), other)).reason).toBe('NotModelPack');
  });

  it('401, 403 and 404 from the registry, tried again later; a manifest over the cap is final', async () => {
    pushModel(registry, 'models/auth', 'v1', [layers[0]!]);
    const s = spec(`${registry.host}/models/auth:v1`);
    registry.basic = { username: 'robot', password: 'pw' };
    expect(refused(await sources().of('k', sm(s), s))).toMatchObject({
      reason: 'Unauthorized',
      final: false,
      message: expect.stringContaining('requires credentials'),
    });
    registry.basic = undefined;
    registry.failPaths.set('/manifests/', 403);
    expect(refused(await sources().of('k', sm(s), s))).toMatchObject({
      reason: 'Forbidden',
      final: false,
      message: expect.stringContaining('403, DENIED'),
    });
    registry.failPaths.clear();
    const missing = spec(`${registry.host}/models/auth:v2`);
    expect(refused(await sources().of('k', sm(missing), missing))).toMatchObject({
      reason: 'NotFound',
      final: false,
      message: expect.stringContaining('has no manifest'),
    });
    expect(refused(await sources({ maxManifestBytes: 100 }).of('k', sm(s), s))).toMatchObject({
      reason: 'SourceTooLarge',
      final: true,
      message: expect.stringContaining('larger than 100 bytes'),
    });
  });

  it('a missing Secret and unusable credentials, never showing a password', async () => {
    pushModel(registry, 'models/creds', 'v1', [layers[0]!]);
    const s = spec(`${registry.host}/models/creds:v1`, { credentialsSecretRef: { name: 'absent' } });
    expect(refused(await sources().of('k', sm(s), s))).toMatchObject({
      reason: 'SecretNotFound',
      final: false,
      message: 'spec.source.oci.credentialsSecretRef: Secret ns/absent not found',
    });
    const bad = spec(`${registry.host}/models/creds:v1`, { credentialsSecretRef: { name: 'bad' } });
    const r = refused(
      await sources({
        secrets: { bad: { '.dockerconfigjson': b64('{"auths": 1, "password": "hunter2"}') } },
      }).of('k', sm(bad), bad),
    );
    expect(r).toMatchObject({ reason: 'InvalidCredentials', final: true });
    expect(r.message).not.toContain('hunter2');
  });

  it('a kept failure is final for the generation: the registry is not asked again', async () => {
    pushModel(registry, 'models/unknown2', 'v1', [
      { mediaType: 'application/x-thing', content: Buffer.from('x'), filepath: 'x' },
    ]);
    const s = spec(`${registry.host}/models/unknown2:v1`);
    const src = sources();
    await src.of('k', sm(s), s);
    const reads = registry.requests.length;
    expect(refused(await src.of('k', sm(s), s)).reason).toBe('UnknownMediaType');
    expect(registry.requests.length).toBe(reads);
  });
});

describe('the owned preheat of a source', () => {
  it("is the manager's image preheat of the manifest by the resolved digest, with the source's credentials", () => {
    const digest = `sha256:${'c'.repeat(64)}`;
    const s = ServedModelSpec.parse({
      ...spec('registry.example.com/models/simple:v1', {
        credentialsSecretRef: { name: 'registry' },
        plainHTTP: false,
      }),
      preheat: { create: true },
    });
    const manifestURL = `https://registry.example.com/v2/models/simple/manifests/${digest}`;
    const preheat = ociPreheat(s.source!.oci!, { manifestURL, blobURLs: [] });
    const owned = ModelPreheatSpec.parse(ownedPreheatSpec(s, ['10.0.0.2', '10.0.0.1'], preheat));
    expect(owned).toMatchObject({
      type: 'image',
      url: `https://registry.example.com/v2/models/simple/manifests/${digest}`,
      imageCredentialsSecretRef: { name: 'registry' },
      scope: 'all_peers',
      targets: { ips: ['10.0.0.1', '10.0.0.2'] },
    });
    expect(owned.objectStorage).toBeUndefined();
  });

  it('anonymous: the layers as a file preheat, whose task ids are the ones the agents download', async () => {
    pushModel(registry, 'models/preheat', 'v1', layers);
    const s = ServedModelSpec.parse({
      ...spec(`${registry.host}/models/preheat:v1`),
      preheat: { create: true },
    });
    const r = ok(await sources().of('ns/p', sm(s), s));
    const owned = ModelPreheatSpec.parse(ownedPreheatSpec(s, ['10.0.0.1'], r.preheat));
    expect(owned).toMatchObject({
      type: 'file',
      urls: r.blobURLs,
      scope: 'all_peers',
      targets: { ips: ['10.0.0.1'] },
    });
    const plan = await planPreheat(owned, 'ns', {} as SecretReader, { bio: 't' });
    const agentSpec = ModelVersionSpecSchema.parse({ ...r.files, version: '1' });
    const expected = newProgress('simple', agentSpec).files.map((f) => f.expectedTaskID);
    expect(plan.tasks.map((t) => t.taskID)).toEqual(expected);
    expect(plan.tasks.map((t) => t.url)).toEqual(r.blobURLs);
  });
});

describe("a ModelPreheat's spec.source.oci", () => {
  const owner = (key: string, generation = 1, recorded?: ServedModel['status']) => ({
    ...sourceOwner(sm(spec(`${registry.host}/models/job:v1`), { generation }, recorded)),
    key,
  });

  it("anonymous: one file job of the blob URLs the ServedModel's owned preheat names, status.source saying the digest", async () => {
    pushModel(registry, 'models/job', 'v1', layers);
    const oci = spec(`${registry.host}/models/job:v1`).source!.oci!;
    const job = await sources().job(owner('ns/j'), oci, 'spec.source.oci');
    if (!job.ok) throw new Error(job.failure.message);
    const files = ok(
      await sources().of(
        'ns/s',
        sm(spec(`${registry.host}/models/job:v1`)),
        spec(`${registry.host}/models/job:v1`),
      ),
    );
    expect(job.content).toEqual({ type: 'file', urls: files.blobURLs, filter: [] });
    expect(job.resolved).toBe(files.digest);
    expect(job.status).toEqual({
      observedGeneration: 1,
      oci: { reference: oci.reference, digest: files.digest },
      files: layers.length,
      bytes: files.bytes,
      preheated: files.blobURLs.length,
    });
  });

  it("with credentials: the manager's image preheat of the manifest by digest with the Secret (no token in the job)", async () => {
    pushModel(registry, 'models/job', 'v1', layers);
    registry.basic = { username: 'robot', password: 'pw-registry-secret' };
    registry.bearer = { token: 'short-lived-pull-token', expiresIn: 40 };
    const config = JSON.stringify({ auths: { [registry.host]: { auth: b64('robot:pw-registry-secret') } } });
    const src = sources({ secrets: { registry: { '.dockerconfigjson': b64(config) } } });
    const oci = {
      ...spec(`${registry.host}/models/job:v1`).source!.oci!,
      credentialsSecretRef: { name: 'registry' },
    };
    const job = await src.job(owner('ns/c'), oci, 'spec.source.oci');
    if (!job.ok) throw new Error(job.failure.message);
    expect(job.content).toEqual({
      type: 'image',
      url: `${registry.url}/v2/models/job/manifests/${job.resolved}`,
      credentialsSecretRef: { name: 'registry' },
    });
    expect(job.status.preheated).toBe(0);
    expect(JSON.stringify(job)).not.toMatch(/short-lived-pull-token|pw-registry-secret/);
  });

  it('a failure is the condition the ServedModel would show, with status.source of the generation only', async () => {
    const oci = spec(`${registry.host}/models/absent:v1`).source!.oci!;
    const job = await sources().job(owner('ns/a', 3), oci, 'spec.source.oci');
    expect(job).toMatchObject({
      ok: false,
      failure: {
        reason: 'NotFound',
        message: expect.stringMatching(/^spec\.source\.oci\.reference: /),
      },
      status: { observedGeneration: 3 },
    });
    expect(job.status.oci).toBeUndefined();
  });
});
