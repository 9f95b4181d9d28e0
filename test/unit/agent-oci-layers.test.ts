/**
 * The agent placing an OCI artifact as the operator asks for it (spec.source.oci): each blob through the peer
 * proxy by its registry URL with the registry's Authorization, checked against its digest; raw layers on their
 * path, tar layers extracted over them; a digest mismatch or an escaping tar entry places nothing and says which
 * layer; each layer's report (bytes, local hit, files unpacked).
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { downloadVersion, newProgress, preflight, type DownloaderConfig } from '../../src/place/placer.ts';
import { ModelVersionSpecSchema, type ModelVersionSpec } from '../../src/place/spec.ts';
import { artifactFiles } from '../../src/sources/oci.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import { parseModelManifest } from '../../src/oci/manifest.ts';
import { parseReference } from '../../src/oci/reference.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { gzip, pushModel, sha256, startFakeRegistry, tarOf, zstd } from '../support/oci-artifacts.ts';
import { downloaderConfig, peerBed } from '../support/peer-bed.ts';

const RAW = 'application/vnd.cncf.model.weight.v1.raw';

const bed = peerBed('registry', startFakeRegistry);
let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'agent-oci-'));
  bed.peer.reset();
  bed.registry.basic = undefined;
  bed.registry.bearer = undefined;
  bed.registry.requests.length = 0;
});
afterEach(() => rm(root, { recursive: true, force: true }));

const config = () => downloaderConfig(bed, root);

/** The agent's spec for `tag` of `repo`, as the operator makes it (oci-source.ts). */
async function specOf(
  repo: string,
  tag: string,
  version = '1',
  maxBytes?: number,
): Promise<ModelVersionSpec> {
  const client = new RegistryClient(bed.registry.host, {
    dispatcher: bed.dispatcher,
    plainHTTP: true,
    credentials: bed.registry.basic,
    allowedHosts: bed.registry.basic ? parseHostRules(`http://${bed.registry.host}`) : undefined,
  });
  const ref = parseReference(`${bed.registry.host}/${repo}:${tag}`);
  const m = await client.manifest(ref);
  const manifest = parseModelManifest(m.body, m.digest, m.contentType, repo);
  const auth = await client.pullAuthorization(ref.repository);
  const files = artifactFiles(client, ref, manifest, auth, { observedGeneration: 1 }, maxBytes).files;
  return ModelVersionSpecSchema.parse({ ...files, version });
}

async function place(spec: ModelVersionSpec) {
  const cfg = config();
  const target = await preflight('simple', spec, cfg);
  const progress = newProgress('simple', spec);
  return { target, progress: await downloadVersion('simple', spec, cfg, progress) };
}

/** Nothing placed: no version, and no temporary directory or waiting archive left. */
async function nothingPlaced() {
  expect(await readdir(join(root, 'simple')).catch(() => [])).toEqual([]);
}

const weights = Buffer.from('onnx weights '.repeat(1000));
const config_ = Buffer.from('name: "simple"\nbackend: "onnxruntime"\n');
const code = tarOf([
  { path: '1/', type: 'Directory' },
  { path: '1/labels.txt', body: 'cat\ndog\n' },
  { path: '1/extra/notes.md', body: '# notes\n' },
]);
const good = [
  { mediaType: RAW, content: weights, filepath: '1/model.onnx' },
  {
    mediaType: 'application/vnd.cnai.model.weight.config.v1.raw',
    content: config_,
    filepath: 'config.pbtxt',
    legacy: true,
  },
  { mediaType: 'application/vnd.cncf.model.doc.v1.tar+gzip', content: gzip(code), filepath: '1' },
  {
    mediaType: 'application/vnd.cncf.model.code.v1.tar+zstd',
    content: zstd(tarOf([{ path: 'README', body: 'hi\n' }])),
    filepath: 'README',
  },
];

describe('the agent places an OCI artifact', () => {
  it('raw layers on their path, tar and tar+zstd layers extracted, every blob once through the proxy, each layer reported', async () => {
    pushModel(bed.registry, 'models/simple', 'v1', good);
    const spec = await specOf('models/simple', 'v1');
    const { target, progress } = await place(spec);
    expect(progress.state).toBe('Ready');
    expect(await readFile(join(target!, '1/model.onnx'))).toEqual(weights);
    expect(await readFile(join(target!, 'config.pbtxt'))).toEqual(config_);
    expect(await readFile(join(target!, '1/labels.txt'), 'utf8')).toBe('cat\ndog\n');
    expect(await readFile(join(target!, '1/extra/notes.md'), 'utf8')).toBe('# notes\n');
    expect(await readFile(join(target!, 'README'), 'utf8')).toBe('hi\n');
    // The archives are gone: the version holds the model's files only, and nothing waits beside it.
    expect((await readdir(target!)).sort()).toEqual(['1', 'README', 'config.pbtxt']);
    expect(await readdir(join(root, 'simple'))).toEqual(['1']);
    expect(progress.files.map((f) => [f.bytes, f.localHit, f.extracted])).toEqual([
      [weights.length, false, undefined],
      [config_.length, false, undefined],
      [good[2]!.content.length, false, 3],
      [good[3]!.content.length, false, 1],
    ]);
    expect(progress.files.every((f) => f.taskID !== undefined && f.taskID === f.expectedTaskID)).toBe(true);
    const blobGets = bed.peer.requests.map((q) => q.url).sort();
    expect(blobGets).toEqual(
      good.map((l) => `${bed.registry.url}/v2/models/simple/blobs/${sha256(l.content)}`).sort(),
    );
    // A second replica's placement on the same node: every layer a local hit, the registry not read again.
    const reads = bed.registry.requests.filter((q) => q.path.includes('/blobs/')).length;
    await rm(join(root, 'simple'), { recursive: true });
    const again = await place(spec);
    expect(again.progress.localHits).toBe(4);
    expect(bed.registry.requests.filter((q) => q.path.includes('/blobs/')).length).toBe(reads);
  });

  it("sends the registry's token (the spec's header set, named by each file) with each blob, so a private registry serves them", async () => {
    bed.registry.basic = { username: 'robot', password: 'pw-secret-0042' };
    bed.registry.bearer = { token: 'pull-token-0042' };
    pushModel(bed.registry, 'models/private', 'v1', good.slice(0, 2));
    const spec = await specOf('models/private', 'v1');
    expect(spec.headerSets).toEqual({ registry: { authorization: 'Bearer pull-token-0042' } });
    expect(spec.files.every((f) => f.headerSet === 'registry' && f.headers === undefined)).toBe(true);
    const { progress } = await place(spec);
    expect(progress.state).toBe('Ready');
    const blobs = bed.registry.requests.filter((q) => q.path.includes('/blobs/'));
    expect(blobs.length).toBe(2);
    expect(blobs.every((q) => q.status === 200 && q.authorization === 'Bearer pull-token-0042')).toBe(true);
    expect(JSON.stringify(progress)).not.toContain('pull-token-0042');
  });

  it('still places the spec of an operator before header sets: the Authorization on each file', async () => {
    bed.registry.bearer = { token: 'older-operator-token' };
    pushModel(bed.registry, 'models/older', 'v1', good.slice(0, 2));
    const { headerSets, ...spec } = await specOf('models/older', 'v1');
    const older = ModelVersionSpecSchema.parse({
      ...spec,
      files: spec.files.map(({ headerSet: _set, ...f }) => ({ ...f, headers: headerSets!['registry'] })),
    });
    expect((await place(older)).progress.state).toBe('Ready');
    const blobs = bed.registry.requests.filter((q) => q.path.includes('/blobs/'));
    expect(blobs.every((q) => q.status === 200 && q.authorization === 'Bearer older-operator-token')).toBe(
      true,
    );
  });

  it('a blob whose bytes are not its digest places nothing, and the failure names the layer', async () => {
    const layers = [good[0]!, { mediaType: RAW, content: Buffer.from('the real bytes'), filepath: 'b.bin' }];
    pushModel(bed.registry, 'models/tampered', 'v1', layers);
    bed.registry.putWrongBlob('models/tampered', sha256(layers[1]!.content), Buffer.from('other  bytes!!'));
    const { progress } = await place(await specOf('models/tampered', 'v1'));
    expect(progress.state).toBe('Failed');
    expect(progress.reason).toBe('ChecksumMismatch');
    expect(progress.error).toMatch(/^layer 1 \(sha256:[0-9a-f]{12}, b\.bin\): its bytes hash to sha256 /);
    await nothingPlaced();
  });

  it('a tar entry that escapes the directory places nothing, and the failure names the layer and the entry', async () => {
    const escape = tarOf([{ path: '../../outside.txt', body: 'x' }]);
    pushModel(bed.registry, 'models/escape', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar', content: escape, filepath: 'code' },
    ]);
    const { progress } = await place(await specOf('models/escape', 'v1'));
    expect(progress.state).toBe('Failed');
    expect(progress.reason).toBe('UnsafeTarEntry');
    expect(progress.error).toMatch(
      /^layer 1 \(sha256:[0-9a-f]{12}, code\): the tar entry "\.\.\/\.\.\/outside\.txt" is refused/,
    );
    expect(progress.files[1]!.state).toBe('Failed');
    await nothingPlaced();
    // Nothing left outside the model either, nor the model's directory (a failed version leaves none).
    expect(await readdir(root)).toEqual([]);
  });

  it("a tar entry over a raw layer's file, and a symbolic link out of the directory, place nothing", async () => {
    const over = tarOf([{ path: '1/model.onnx', body: 'not the weights' }]);
    pushModel(bed.registry, 'models/over', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar', content: over, filepath: 'x' },
    ]);
    const a = await place(await specOf('models/over', 'v1'));
    expect(a.progress.reason).toBe('UnsafeTarEntry');
    await nothingPlaced();
    const link = tarOf([{ path: 'l', type: 'SymbolicLink', linkpath: '/etc' }]);
    pushModel(bed.registry, 'models/link', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar', content: link, filepath: 'l' },
    ]);
    const b = await place(await specOf('models/link', 'v1'));
    expect(b.progress.reason).toBe('UnsafeTarEntry');
    await nothingPlaced();
  });

  it('an archive that is not its media type places nothing, naming the layer', async () => {
    pushModel(bed.registry, 'models/notgzip', 'v1', [
      good[0]!,
      {
        mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip',
        content: Buffer.from('not gzip at all'),
        filepath: 'x',
      },
    ]);
    const { progress } = await place(await specOf('models/notgzip', 'v1'));
    expect(progress.reason).toBe('InvalidArchive');
    expect(progress.error).toMatch(/^layer 1 \(sha256:[0-9a-f]{12}, x\) is not a readable tar\+gzip archive/);
    await nothingPlaced();
  });

  it('a tar layer that unpacks past the free space of the model volume places nothing, naming the layer', async () => {
    // 12 MiB of zeros in a gzip layer of some KiB: the preflight sees the blob, only the extraction sees the rest.
    const bomb = gzip(tarOf([{ path: 'zeros', body: Buffer.alloc(12 << 20) }]));
    pushModel(bed.registry, 'models/bomb', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: bomb, filepath: 'x' },
    ]);
    const spec = await specOf('models/bomb', 'v1');
    const readings: string[] = [];
    const cfg: DownloaderConfig = {
      ...config(),
      limits: { ...config().limits, minFreeBytes: 1 << 20 },
      freeBytes: (path) => (readings.push(path), Promise.resolve(8 << 20)),
    };
    await preflight('simple', spec, cfg);
    const progress = await downloadVersion('simple', spec, cfg, newProgress('simple', spec));
    expect(progress.reason).toBe('InsufficientStorage');
    expect(progress.error).toMatch(
      /^layer 1 \(sha256:[0-9a-f]{12}, x\): the tar entry "zeros" needs 12582912 bytes: the volume has 8388608 bytes free and 1048576 must stay free/,
    );
    expect(progress.files[1]!.state).toBe('Failed');
    expect(readings.length).toBeGreaterThanOrEqual(2);
    await nothingPlaced();
  });

  it("holds the spec's byte cap (spec.source.oci.maxBytes) over what the tar layers unpack, not the agent's 1 TiB", async () => {
    const big = gzip(tarOf([{ path: 'zeros', body: Buffer.alloc(1 << 20) }]));
    pushModel(bed.registry, 'models/big', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: big, filepath: 'x' },
    ]);
    // The layers' own sizes fit (the preflight passes); the archive's content does not.
    const spec = await specOf('models/big', 'v1', '1', weights.length + 100_000);
    expect(spec.maxBytes).toBe(weights.length + 100_000);
    const { progress } = await place(spec);
    expect(progress.reason).toBe('LimitExceeded');
    expect(progress.error).toMatch(
      /^layer 1 \(sha256:[0-9a-f]{12}, x\): the tar entry "zeros" takes the model past the cap of \d+ bytes/,
    );
    await nothingPlaced();
  });

  it("holds the agent's file cap over what the tar layers unpack", async () => {
    const many = tarOf(Array.from({ length: 5 }, (_, i) => ({ path: `f${i}`, body: 'x' })));
    pushModel(bed.registry, 'models/many', 'v1', [
      good[0]!,
      { mediaType: 'application/vnd.cncf.model.code.v1.tar', content: many, filepath: 'x' },
    ]);
    const spec = await specOf('models/many', 'v1');
    const cfg = { ...config(), limits: { ...config().limits, maxFiles: 4 } };
    const progress = await downloadVersion('simple', spec, cfg, newProgress('simple', spec));
    expect(progress.reason).toBe('LimitExceeded');
    expect(progress.error).toContain('layer 1');
    await nothingPlaced();
  });
});
