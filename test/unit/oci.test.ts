/**
 * OCI model artifacts without external processes: references, challenges, credentials, the ModelPack manifest,
 * safe tar extraction, and the placement through the peer-proxy emulator from a registry made here, with every bad
 * input refused by a typed error naming the layer and nothing placed (no directory, no temporary left).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseChallenges } from '../../src/oci/challenge.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import { dockerConfigCredentials, secretCredentials } from '../../src/oci/credentials.ts';
import { OciError, OciReason } from '../../src/oci/errors.ts';
import { PlaceError, PlaceReason } from '../../src/place/errors.ts';
import { extractLayer, newExtractState } from '../../src/place/extract.ts';
import { parseModelManifest } from '../../src/oci/manifest.ts';
import { DEFAULT_PLACE_LIMITS, placeArtifact, type PlaceLimits } from '../../src/cli/fetch-oci-place.ts';
import { formatReference, parseReference } from '../../src/oci/reference.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import {
  gzip,
  modelManifest,
  pushModel,
  sha256,
  startFakeRegistry,
  tarOf,
  zstd,
  type TarEntry,
} from '../support/oci-artifacts.ts';
import { peerBed } from '../support/peer-bed.ts';
import { registryCredentialTag } from '../../src/storage/credential-tag.ts';

const RAW = 'application/vnd.cncf.model.weight.v1.raw';
const TAR = 'application/vnd.cncf.model.code.v1.tar';
const D = `sha256:${'a'.repeat(64)}`;

/** A refusal in the registry's terms (OciError) or the placer's (PlaceError: what a tar layer holds). */
async function refusal(p: Promise<unknown> | (() => unknown)): Promise<OciError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    expect(e instanceof OciError || e instanceof PlaceError, String(e)).toBe(true);
    return e as OciError;
  }
  throw new Error('expected an OciError or a PlaceError');
}

describe('references', () => {
  it('parses registry, repository, tag and digest, with or without oci://', () => {
    expect(parseReference('oci://registry.example.com:5000/models/triton/simple:v1')).toEqual({
      registry: 'registry.example.com:5000',
      repository: 'models/triton/simple',
      tag: 'v1',
      digest: undefined,
    });
    const r = parseReference(`127.0.0.1:5000/m@${D}`);
    expect(r).toMatchObject({ registry: '127.0.0.1:5000', repository: 'm', digest: D });
    expect(formatReference(parseReference(`localhost/a/b:t@${D}`))).toBe(`localhost/a/b:t@${D}`);
  });
  it.each([
    ['models/simple:v1', /not a registry host/],
    ['registry.example.com/Models:v1', /lower-case path components/],
    ['registry.example.com/m', /give a tag/],
    ['registry.example.com/m@sha256:abc', /64 lower-case hex/],
    ['registry.example.com/m:-bad', /a tag is/],
    ['https://registry.example.com/m:v1', /only oci:\/\//],
  ])('refuses %s', async (text, why) => {
    const e = await refusal(() => parseReference(text));
    expect(e.reason).toBe(OciReason.InvalidReference);
    expect(e.message).toMatch(why);
  });
});

describe('challenges and credentials', () => {
  it('reads a Bearer challenge with quoted parameters, and a Basic one', () => {
    expect(
      parseChallenges(
        'Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push"',
      ),
    ).toEqual([
      {
        scheme: 'bearer',
        params: {
          realm: 'https://auth.example.com/token',
          service: 'registry.example.com',
          scope: 'repository:a/b:pull,push',
        },
      },
    ]);
    expect(parseChallenges('Basic realm="x\\"y", Bearer realm=r')).toEqual([
      { scheme: 'basic', params: { realm: 'x"y' } },
      { scheme: 'bearer', params: { realm: 'r' } },
    ]);
  });
  it('takes the registry entry of a docker config (auth or username/password), and username/password Secrets', () => {
    const config = JSON.stringify({
      auths: {
        'https://reg.example.com/v1/': { auth: Buffer.from('alice:pa:ss').toString('base64') },
        'other.example.com:5000': { username: 'bob', password: 'secret-pw' },
      },
    });
    expect(dockerConfigCredentials(config, 'reg.example.com')).toEqual({
      username: 'alice',
      password: 'pa:ss',
    });
    expect(dockerConfigCredentials(config, 'other.example.com:5000')).toEqual({
      username: 'bob',
      password: 'secret-pw',
    });
    expect(dockerConfigCredentials(config, 'third.example.com')).toBeUndefined();
    expect(secretCredentials({ username: 'u', password: 'p' }, 'x.example.com')).toEqual({
      username: 'u',
      password: 'p',
    });
  });
  it('refuses unusable credentials without showing them', async () => {
    const e = await refusal(() =>
      dockerConfigCredentials('{"auths":{"r.example.com":{"auth":"bm9jb2xvbg=="}}}', 'r.example.com'),
    );
    expect(e.reason).toBe(OciReason.InvalidCredentials);
    expect(e.message).not.toContain('bm9jb2xvbg');
    expect((await refusal(() => dockerConfigCredentials('not json', 'r'))).reason).toBe(
      OciReason.InvalidCredentials,
    );
    expect((await refusal(() => secretCredentials({ token: 'x' }, 'r'))).reason).toBe(
      OciReason.InvalidCredentials,
    );
  });
});

describe('the ModelPack manifest', () => {
  const parse = (body: Buffer, type?: string) =>
    parseModelManifest(body, sha256(body), type, 'r.example.com/m:v1');
  it('reads model-spec layers and the older vnd.cnai types modctl writes, with their file paths', () => {
    const { body } = modelManifest(
      [
        {
          mediaType: 'application/vnd.cnai.model.weight.v1.raw',
          content: Buffer.from('w'),
          filepath: '1/w.bin',
          legacy: true,
        },
        {
          mediaType: 'application/vnd.cncf.model.code.v1.tar+zstd',
          content: Buffer.from('t'),
          filepath: '1/model.py',
        },
      ],
      {
        artifactType: 'application/vnd.cnai.model.manifest.v1+json',
        configType: 'application/vnd.cnai.model.config.v1+json',
      },
    );
    const m = parse(body);
    expect(m.layers.map((l) => [l.kind, l.format, l.legacy, l.filepath])).toEqual([
      ['weight', 'raw', true, '1/w.bin'],
      ['code', 'tar+zstd', false, '1/model.py'],
    ]);
    expect(m.digest).toBe(sha256(body));
  });
  it.each([
    [
      'an image index',
      { mediaType: 'application/vnd.oci.image.index.v1+json' },
      OciReason.NotModelPack,
      /image index/,
    ],
    [
      'an image',
      { artifactType: null, configType: 'application/vnd.oci.image.config.v1+json' },
      OciReason.NotModelPack,
      /not a ModelPack model/,
    ],
    [
      'another artifact',
      { artifactType: 'application/vnd.example.thing' },
      OciReason.NotModelPack,
      /artifactType is application\/vnd.example.thing/,
    ],
    [
      'an unknown config',
      { configType: 'application/vnd.example.config' },
      OciReason.UnknownMediaType,
      /config/,
    ],
  ] as const)('refuses %s', async (_what, opts, reason, why) => {
    const { body } = modelManifest(
      [{ mediaType: RAW, content: Buffer.from('w'), filepath: 'w' }],
      opts as never,
    );
    const e = await refusal(() => parse(body));
    expect(e.reason).toBe(reason);
    expect(e.message).toMatch(why);
  });
  it('names the layer of an unknown media type, a raw layer without a path, an unsafe path and a path used twice', async () => {
    const cases: [Parameters<typeof modelManifest>[0], OciReason, RegExp][] = [
      [
        [{ mediaType: 'application/vnd.oci.image.layer.v1.tar', content: Buffer.from('x'), filepath: 'a' }],
        OciReason.UnknownMediaType,
        /layer 0 \(sha256:.*, a\).*not a ModelPack layer/,
      ],
      [
        [{ mediaType: RAW, content: Buffer.from('x') }],
        OciReason.InvalidLayer,
        /layer 0 .*without the org.cncf.model.filepath/,
      ],
      [
        [{ mediaType: RAW, content: Buffer.from('x'), filepath: '../etc/passwd' }],
        OciReason.InvalidLayer,
        /relative path/,
      ],
      [
        [
          { mediaType: RAW, content: Buffer.from('x'), filepath: 'a' },
          { mediaType: RAW, content: Buffer.from('y'), filepath: 'a' },
        ],
        OciReason.InvalidLayer,
        /layer 1 .*names the file a, as layer 0/,
      ],
    ];
    for (const [layers, reason, why] of cases) {
      const e = await refusal(() => parse(modelManifest(layers).body));
      expect(e.reason).toBe(reason);
      expect(e.message).toMatch(why);
      expect(e.layer).toMatch(/^layer \d/);
    }
  });
  it('refuses a Docker manifest and a body that is not JSON', async () => {
    expect(
      (
        await refusal(() =>
          parse(
            Buffer.from(
              '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json"}',
            ),
          ),
        )
      ).reason,
    ).toBe(OciReason.NotModelPack);
    expect((await refusal(() => parse(Buffer.from('<html>')))).reason).toBe(OciReason.NotModelPack);
  });
});

describe('tar extraction', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'oci-extract-'));
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));
  const limits = { maxBytes: 1 << 20, maxFiles: 100 };
  async function extract(entries: TarEntry[], format: 'tar' | 'tar+gzip' | 'tar+zstd' = 'tar', lim = limits) {
    const tar = tarOf(entries);
    const blob = join(dir, 'blob');
    await writeFile(blob, format === 'tar' ? tar : format === 'tar+gzip' ? gzip(tar) : zstd(tar));
    const out = join(dir, 'out');
    await rm(out, { recursive: true, force: true });
    await import('node:fs/promises').then((f) => f.mkdir(out));
    const r = await extractLayer(blob, format, out, 'layer 3 (sha256:x, code)', lim, newExtractState());
    return { out, ...r };
  }
  it.each(['tar', 'tar+gzip', 'tar+zstd'] as const)(
    'extracts files, directories and inside links of a %s layer',
    async (format) => {
      const { out, files, bytes } = await extract(
        [
          { path: '1/', type: 'Directory' },
          { path: '1/model.py', body: 'print(1)\n', mode: 0o755 },
          { path: '1/alias.py', type: 'SymbolicLink', linkpath: 'model.py' },
          { path: 'same.py', type: 'Link', linkpath: '1/model.py' },
        ],
        format,
      );
      expect(await readFile(join(out, '1/alias.py'), 'utf8')).toBe('print(1)\n');
      expect((await stat(join(out, 'same.py'))).nlink).toBe(2);
      expect((await stat(join(out, '1/model.py'))).mode & 0o777).toBe(0o755);
      expect({ files, bytes }).toEqual({ files: 4, bytes: 9 });
    },
  );
  it.each([
    ['an absolute path', [{ path: '/etc/x', body: 'x' }], /"\/etc\/x" is refused: it is absolute/],
    ['a .. path', [{ path: 'a/../../x', body: 'x' }], /"a\/..\/..\/x" is refused: it has a ".." segment/],
    [
      'a symbolic link leaving the directory',
      [{ path: 'l', type: 'SymbolicLink', linkpath: '../../etc' }],
      /link target "..\/..\/etc" leaves/,
    ],
    ['an absolute symbolic link', [{ path: 'l', type: 'SymbolicLink', linkpath: '/etc/passwd' }], /absolute/],
    [
      'a write through a symbolic link',
      [
        { path: 'l', type: 'SymbolicLink', linkpath: '.' },
        { path: 'l/x', body: 'x' },
      ],
      /under the symbolic link l/,
    ],
    [
      'a hard link to a file outside',
      [{ path: 'h', type: 'Link', linkpath: '../outside' }],
      /hard-link target/,
    ],
    [
      'a hard link to something not extracted',
      [{ path: 'h', type: 'Link', linkpath: 'nothing' }],
      /not a regular file extracted before/,
    ],
    [
      'a character device',
      [{ path: 'dev', type: 'CharacterDevice', devmaj: 1, devmin: 3 }],
      /CharacterDevice entry/,
    ],
    ['a FIFO', [{ path: 'p', type: 'FIFO' }], /FIFO entry/],
    [
      'a file twice',
      [
        { path: 'a', body: 'x' },
        { path: 'a', body: 'y' },
      ],
      /already made that path/,
    ],
  ] as [string, TarEntry[], RegExp][])(
    'refuses %s, naming the layer and the entry',
    async (_what, entries, why) => {
      const e = await refusal(extract(entries));
      expect(e.reason).toBe(PlaceReason.UnsafeTarEntry);
      expect(e.message).toMatch(/^layer 3 \(sha256:x, code\): /);
      expect(e.message).toMatch(why);
    },
  );
  it('holds the byte and file caps, and refuses an archive that is not its media type', async () => {
    expect(
      (
        await refusal(
          extract([{ path: 'big', body: Buffer.alloc(2000) }], 'tar', { maxBytes: 1000, maxFiles: 10 }),
        )
      ).reason,
    ).toBe(OciReason.LimitExceeded);
    expect(
      (
        await refusal(
          extract(
            [
              { path: 'a', body: 'x' },
              { path: 'b', body: 'y' },
            ],
            'tar',
            { maxBytes: 1000, maxFiles: 1 },
          ),
        )
      ).reason,
    ).toBe(OciReason.LimitExceeded);
    const blob = join(dir, 'notgzip');
    await writeFile(blob, tarOf([{ path: 'a', body: 'x' }]));
    const e = await refusal(extractLayer(blob, 'tar+gzip', dir, 'layer 0 (x)', limits, newExtractState()));
    expect(e.reason).toBe(PlaceReason.InvalidArchive);
  });
});

describe('placing an artifact through the peer proxy', () => {
  let dir: string;
  const limits: PlaceLimits = { ...DEFAULT_PLACE_LIMITS, minFreeBytes: 0 };
  const bed = peerBed('registry', startFakeRegistry);
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'oci-place-'));
    bed.registry.failPaths.clear();
    bed.registry.basic = undefined;
    bed.peer.reset();
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const client = (opts: Partial<ConstructorParameters<typeof RegistryClient>[1]> = {}) =>
    new RegistryClient(bed.registry.host, { dispatcher: bed.dispatcher, plainHTTP: true, ...opts });
  const place = (
    tag: string,
    opts: Partial<ConstructorParameters<typeof RegistryClient>[1]> = {},
    lim = limits,
  ) =>
    placeArtifact({
      client: client(opts),
      ref: parseReference(`${bed.registry.host}/models/m:${tag}`),
      dest: join(dir, 'm', '1'),
      proxy: bed.peer.url,
      dispatcher: bed.dispatcher,
      limits: lim,
    });
  /** Nothing placed: no version directory, and no temporary left beside it. */
  async function nothingPlaced() {
    expect(await readdir(join(dir, 'm')).catch(() => [])).toEqual([]);
  }

  const weights = randomBytes(300_000);
  const code = tarOf([
    { path: '1/', type: 'Directory' },
    { path: '1/model.py', body: 'x = 1\n' },
  ]);
  const good = [
    { mediaType: RAW, content: weights, filepath: '1/weights.bin' },
    {
      mediaType: 'application/vnd.cnai.model.weight.config.v1.raw',
      content: Buffer.from('name: "m"\n'),
      filepath: 'config.pbtxt',
      legacy: true,
    },
    { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: gzip(code), filepath: '1/model.py' },
  ];

  it('places raw and tar layers, every blob through the proxy by its registry URL, and reports each layer', async () => {
    const digest = pushModel(bed.registry, 'models/m', 'good', good);
    const r = await place('good');
    expect(r.digest).toBe(digest);
    expect(await readFile(join(dir, 'm/1/1/weights.bin'))).toEqual(weights);
    expect(await readFile(join(dir, 'm/1/config.pbtxt'), 'utf8')).toBe('name: "m"\n');
    expect(await readFile(join(dir, 'm/1/1/model.py'), 'utf8')).toBe('x = 1\n');
    expect(r.layers.map((l) => [l.index, l.bytes, l.files, l.localHit])).toEqual([
      [0, weights.length, 1, false],
      [1, 10, 1, false],
      [2, good[2]!.content.length, 2, false],
    ]);
    expect(r.layers.every((l) => l.taskID !== undefined)).toBe(true);
    const blobGets = bed.peer.requests.filter((q) => q.url.includes('/blobs/sha256:')).map((q) => q.url);
    expect(blobGets.sort()).toEqual(
      good.map((l) => `${bed.registry.url}/v2/models/m/blobs/${sha256(l.content)}`).sort(),
    );
    expect((await readdir(join(dir, 'm'))).sort()).toEqual(['1']);
    // Again into another directory: every blob a local hit of the node's peer.
    const again = await placeArtifact({
      client: client(),
      ref: parseReference(`${bed.registry.host}/models/m:good`),
      dest: join(dir, 'm', '2'),
      proxy: bed.peer.url,
      dispatcher: bed.dispatcher,
      limits,
    });
    expect(again.localHits).toBe(3);
  });

  it('refuses a blob whose bytes are not its digest, naming the layer, and places nothing', async () => {
    const layers = [good[0]!, { mediaType: RAW, content: Buffer.from('the real bytes'), filepath: 'b.bin' }];
    pushModel(bed.registry, 'models/m', 'tampered', layers);
    bed.registry.putWrongBlob('models/m', sha256(layers[1]!.content), Buffer.from('other  bytes!!'));
    const e = await refusal(place('tampered'));
    expect(e.reason).toBe(OciReason.DigestMismatch);
    expect(e.message).toMatch(
      /^layer 1 \(sha256:[0-9a-f]{12}, b\.bin\): its bytes hash to sha256 [0-9a-f]{64}, not the /,
    );
    await nothingPlaced();
  });

  it('refuses an unsafe tar layer after downloading, and places nothing', async () => {
    pushModel(bed.registry, 'models/m', 'escape', [
      good[0]!,
      { mediaType: TAR, content: tarOf([{ path: '../../evil', body: 'x' }]), filepath: 'evil' },
    ]);
    const e = await refusal(place('escape'));
    expect(e.reason).toBe(PlaceReason.UnsafeTarEntry);
    expect(e.layer).toMatch(/^layer 1 /);
    await nothingPlaced();
    await expect(stat(join(dir, 'evil'))).rejects.toThrow();
  });

  it('refuses a manifest that is not ModelPack, or has an unknown layer type, before any blob is fetched', async () => {
    pushModel(
      bed.registry,
      'models/m',
      'image',
      [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', content: gzip(code) }],
      { artifactType: null, configType: 'application/vnd.oci.image.config.v1+json' },
    );
    expect((await refusal(place('image'))).reason).toBe(OciReason.NotModelPack);
    pushModel(bed.registry, 'models/m', 'unknown', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.weight.v1.tar+lz4', content: Buffer.from('x'), filepath: 'x' },
    ]);
    const e = await refusal(place('unknown'));
    expect(e.reason).toBe(OciReason.UnknownMediaType);
    expect(e.layer).toMatch(/^layer 1 /);
    expect(bed.peer.requests.filter((q) => q.url.includes('/blobs/'))).toEqual([]);
    await nothingPlaced();
  });

  it('says 401, 403 and 404 from the registry in its terms, for the manifest and for a blob', async () => {
    pushModel(bed.registry, 'models/m', 'auth', good);
    bed.registry.basic = { username: 'u', password: 'registry-password-1' };
    const anonymous = await refusal(place('auth', { allowedHosts: parseHostRules('http://127.0.0.1') }));
    expect([anonymous.reason, anonymous.status]).toEqual([OciReason.Unauthorized, 401]);
    expect(anonymous.message).toMatch(/requires credentials/);
    const wrong = await refusal(
      place('auth', {
        allowedHosts: parseHostRules('http://127.0.0.1'),
        credentials: { username: 'u', password: 'wrong-password-22' },
      }),
    );
    expect(wrong.reason).toBe(OciReason.Unauthorized);
    expect(wrong.message).not.toContain('wrong-password-22');
    // Basic credentials work, and travel with the blob GETs through the proxy.
    const ok = await place('auth', {
      allowedHosts: parseHostRules('http://127.0.0.1'),
      credentials: { username: 'u', password: 'registry-password-1' },
    });
    expect(ok.files).toBe(4);
    await rm(join(dir, 'm'), { recursive: true });
    bed.registry.basic = undefined;
    bed.registry.failPaths.set('/manifests/', 403);
    expect((await refusal(place('auth'))).reason).toBe(OciReason.Forbidden);
    bed.registry.failPaths.clear();
    expect((await refusal(place('missing-tag'))).reason).toBe(OciReason.NotFound);
    bed.registry.failPaths.set(`/blobs/${sha256(weights)}`, 404);
    bed.peer.reset();
    const blob = await refusal(place('auth'));
    expect(blob.reason).toBe(OciReason.NotFound);
    expect(blob.layer).toMatch(/^layer 0 .*1\/weights\.bin/);
    bed.registry.failPaths.set(`/blobs/${sha256(weights)}`, 403);
    bed.peer.reset();
    expect((await refusal(place('auth'))).reason).toBe(OciReason.Forbidden);
    await nothingPlaced();
  });

  it('refuses a manifest over the cap, credentials without an allow-list, and a registry outside it', async () => {
    const { body } = modelManifest(
      Array.from({ length: 200 }, (_, i) => ({
        mediaType: RAW,
        content: Buffer.from(`w${i}`),
        filepath: `w${i}`,
      })),
    );
    bed.registry.putManifest('models/m', 'huge', body);
    const e = await refusal(place('huge', { maxManifestBytes: 4096 }));
    expect(e.reason).toBe(OciReason.SourceTooLarge);
    expect(e.message).toMatch(/the registry answer for .* was larger than 4096 bytes/);
    expect(
      (await refusal(() => client({ credentials: { username: 'u', password: 'p-12345678' } }))).reason,
    ).toBe(OciReason.RegistryNotAllowed);
    expect(
      (await refusal(() => client({ allowedHosts: parseHostRules('registry.example.com') }))).reason,
    ).toBe(OciReason.RegistryNotAllowed);
    await nothingPlaced();
  });

  it("peerload fetch oci:// with credentials: every blob's task carries the credentials' tag; anonymous, none", async () => {
    const { run: fetchCommand } = await import('../../src/cli/fetch.ts');
    pushModel(bed.registry, 'models/m', 'good', good);
    const fetchWith = async (dest: string, env: Record<string, string>) => {
      const saved = { ...process.env };
      Object.assign(process.env, env);
      const err: string[] = [];
      try {
        const code = await fetchCommand(
          [
            `oci://${bed.registry.host}/models/m:good`,
            join(dir, dest),
            '--plain-http',
            '--proxy',
            bed.peer.url,
            '--min-free-bytes',
            '0',
            '--allowed-registry-hosts',
            'http://127.0.0.1',
          ],
          { out: () => undefined, err: (l) => err.push(l) },
        );
        expect(err).toEqual([]);
        return code;
      } finally {
        process.env = saved;
      }
    };
    const blobTags = () =>
      bed.peer.requests.filter((q) => q.url.includes('/blobs/')).map((q) => q.headers['x-dragonfly-tag']);
    bed.registry.basic = { username: 'robot', password: 'registry-secret-99' };
    expect(
      await fetchWith('private', {
        PEERLOAD_REGISTRY_USERNAME: 'robot',
        PEERLOAD_REGISTRY_PASSWORD: 'registry-secret-99',
      }),
    ).toBe(0);
    const tag = registryCredentialTag(bed.registry.url, 'models/m', {
      username: 'robot',
      password: 'registry-secret-99',
    });
    expect(blobTags()).toEqual([tag, tag, tag]);
    bed.registry.basic = undefined;
    bed.peer.reset();
    expect(await fetchWith('public', {})).toBe(0);
    expect(blobTags()).toEqual([undefined, undefined, undefined]);
  });

  it('plain HTTP: credentials go to a registry without TLS only when it is listed as http://host', async () => {
    const before = bed.registry.requests.length;
    const credentials = { username: 'u', password: 'registry-password-1' };
    const plain = await refusal(() => client({ allowedHosts: parseHostRules('127.0.0.1'), credentials }));
    expect(plain.reason).toBe(OciReason.RegistryNotAllowed);
    expect(plain.message).toContain('is plain HTTP');
    expect(plain.message).toContain('an admin adds http://127.0.0.1:');
    expect(plain.message).not.toContain('registry-password-1');
    expect(bed.registry.requests.length).toBe(before);
    expect(() => client({ allowedHosts: parseHostRules('http://127.0.0.1'), credentials })).not.toThrow();
  });

  it('refuses an artifact over the byte cap before downloading', async () => {
    pushModel(bed.registry, 'models/m', 'good', good);
    const e = await refusal(place('good', {}, { ...limits, maxBytes: 1000 }));
    expect(e.reason).toBe(OciReason.LimitExceeded);
    expect(bed.peer.requests).toEqual([]);
    await nothingPlaced();
  });

  it('a tar layer that unpacks past the free space places nothing, though its blob fitted', async () => {
    const bomb = gzip(tarOf([{ path: 'zeros', body: Buffer.alloc(12 << 20) }]));
    pushModel(bed.registry, 'models/m', 'bomb', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: bomb, filepath: 'x' },
    ]);
    const freeBytes = () => Promise.resolve(8 << 20);
    const e = await refusal(place('bomb', {}, { ...limits, minFreeBytes: 1 << 20, freeBytes }));
    expect(e.reason).toBe(PlaceReason.InsufficientStorage);
    expect(e.message).toMatch(
      /^layer 1 \(sha256:[0-9a-f]{12}, x\): the tar entry "zeros" needs 12582912 bytes/,
    );
    await nothingPlaced();
  });
});

describe('peerload fetch oci://', () => {
  const run = async (argv: string[], env: Record<string, string> = {}) => {
    const { run: fetchCommand } = await import('../../src/cli/fetch.ts');
    const saved = { ...process.env };
    Object.assign(process.env, env);
    try {
      return await fetchCommand(argv, { out: () => undefined, err: () => undefined });
    } finally {
      process.env = saved;
    }
  };
  it('refuses a bad reference, flags of the other form, and credentials without an allow-list, naming the fix', async () => {
    await expect(run(['oci://models/m:v1', '/tmp/peerload-never'])).rejects.toThrow(
      /InvalidReference|not a registry host/,
    );
    await expect(run(['oci://r.example.com/m:v1'])).rejects.toThrow(/give the directory/);
    await expect(run(['oci://r.example.com/m:v1', '/tmp/x', '--root', '/tmp'])).rejects.toThrow(
      /not --name, --spec or --root/,
    );
    await expect(run(['--name', 'm', '--spec', 'x', '--root', '/tmp', '--plain-http'])).rejects.toThrow(
      /--plain-http is for an oci:\/\/ reference/,
    );
    await expect(
      run(['oci://r.example.com/m:v1', '/tmp/peerload-never/x', '--min-free-bytes', '0'], {
        PEERLOAD_REGISTRY_USERNAME: 'u',
        PEERLOAD_REGISTRY_PASSWORD: 'env-password-123',
      }),
    ).rejects.toThrow(/RegistryNotAllowed: registry credentials are given but no registry allow-list/);
    await expect(
      run(['oci://r.example.com/m:v1', '/tmp/x', '--allowed-registry-hosts', 'bad host!']),
    ).rejects.toThrow(/--allowed-registry-hosts: "bad host!"/);
  });
});
