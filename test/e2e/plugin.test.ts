/**
 * The Java endpoint plugin inside a REAL TorchServe 0.12.0 (token authorization on), downloading through the
 * peer-proxy emulator from MinIO (which verifies SigV4 presigned URLs) and Azurite (which verifies SAS).
 */
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_FILTERS, effectiveFilter, objectURL } from '../../src/storage/objecturl.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { startAzurite, type Azurite } from '../support/azurite.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import {
  buildLargeModelArchive,
  buildModelArchive,
  LABELS,
  type ModelArchive,
} from '../support/model-archive.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/process.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { withHeapSampling } from '../support/jvm-heap.ts';

const BUCKET = 'models';
const GiB = 1024 * 1024 * 1024;
const MiB = 1024 * 1024;

// What the Java plugin must send by default: the same list as the TypeScript side.
const S3_FILTER = DEFAULT_FILTERS.s3;

interface PluginAnswer {
  Status: string;
  TaskID?: string;
  CacheHit?: boolean;
  LocalHit?: boolean;
  ErrorType?: string;
}

let work: string;
let jar: string;
let minio: MinIO;
let azurite: Azurite;
let proxy: PeerProxy;
let ts: TorchServe;
let tiny: ModelArchive;
let configPath: string;

function s3Config(addr: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return minioPluginConfig(minio, BUCKET, addr, { header: { 'X-Peerload-Test': 'plugin-e2e' }, ...extra });
}

async function writeConfig(config: Record<string, unknown>): Promise<void> {
  await writePluginConfig(configPath, config);
}

async function register(query: string): Promise<{ status: number; body: PluginAnswer; raw: string }> {
  const res = await fetch(`${ts.managementURL}/p2p/models?${query}`, {
    method: 'POST',
    headers: ts.managementAuth(),
  });
  const raw = await res.text();
  expect(res.headers.get('content-type')).toMatch(/application\/json/);
  // Valid JSON ALWAYS, whatever the status.
  const body = JSON.parse(raw) as PluginAnswer;
  expect(typeof body.Status).toBe('string');
  return { status: res.status, body, raw };
}

async function listModels(): Promise<string[]> {
  const res = await fetch(`${ts.managementURL}/models`, { headers: ts.managementAuth() });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { models: { modelName: string }[] };
  return body.models.map((m) => m.modelName);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'peerload-plugin-e2e-'));
  jar = await pluginJar();

  [minio, azurite, proxy] = await Promise.all([startMinIO(), startAzurite(), startPeerProxy()]);
  await minio.createBucket(BUCKET);
  tiny = await buildModelArchive(work, { modelName: 'tiny' });
  await minio.client.send(
    new PutObjectCommand({ Bucket: BUCKET, Key: 'team a/tiny.mar', Body: createReadStream(tiny.path) }),
  );

  configPath = join(work, 'p2p-endpoint.json');
  await writeConfig(s3Config(proxy.url));
  ts = await startTorchServe({
    pluginJars: [jar],
    env: { P2P_ENDPOINT_CONFIG: configPath },
    vmargs: '-Xmx384m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError',
  });
});

afterAll(async () => {
  await ts?.stop();
  await Promise.all([proxy?.close(), minio?.stop(), azurite?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

describe('p2p endpoint plugin in TorchServe 0.12.0', () => {
  it('rejects calls without the management token (token authorization is on)', async () => {
    const res = await fetch(`${ts.managementURL}/p2p/models?file_name=x.mar`, { method: 'POST' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { type: string }).type).toBe('InvalidKeyException');
  });

  it('downloads through the peer proxy with both filter headers and registers the model (200)', async () => {
    const before = proxy.requests.length;
    const { status, body } = await register(`file_name=${encodeURIComponent('team a/tiny.mar')}`);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.Status).toBe(
      'Model "tiny" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    );
    // Not a local hit; whether a peer or the origin served it the daemon does not say, so no CacheHit.
    expect(body.LocalHit).toBe(false);
    expect(body.CacheHit).toBeUndefined();
    expect(body.TaskID).toMatch(/^[0-9a-f]{64}$/);
    expect(await listModels()).toContain('tiny');

    const seen = proxy.requests.slice(before);
    expect(seen).toHaveLength(1);
    const req = seen[0]!;
    // Absolute-form request for the signed object URL of the configured bucket.
    expect(req.url.startsWith(`${minio.endpoint}/${BUCKET}/team%20a/tiny.mar?`)).toBe(true);
    expect(req.url).toContain('X-Amz-Signature=');
    expect(req.headers['x-dragonfly-filtered-query-params']).toBe(S3_FILTER.join(','));
    expect(req.headers['x-dragonfly-filter']).toBe(S3_FILTER.join('&'));
    expect(req.headers['x-peerload-test']).toBe('plugin-e2e');
    expect(req.headers['x-dragonfly-use-p2p']).toBe('true'); // P2P whatever the daemon's proxy.rules
    expect(req.status).toBe(200);
    expect(req.taskID).toBe(body.TaskID);

    // The same task id as the operator computes for a preheat of the unsigned URL (TypeScript side).
    const location = {
      type: 's3' as const,
      bucket: BUCKET,
      region: minio.region,
      endpoint: minio.endpoint,
      pathStyle: true,
    };
    const unsigned = objectURL(location, 'team a/tiny.mar');
    // With the tag the credentials give (the plugin signs with them): only their holders share this task.
    expect(body.TaskID).toBe(
      taskID({
        url: unsigned,
        filter: effectiveFilter(location),
        tag: credentialTag(location, minio.credentials()),
        rule: '1.4',
      }),
    );
    expect(req.headers['x-dragonfly-tag']).toBe(credentialTag(location, minio.credentials()));

    // The archive is in the model store under the key's last segment; no temporary file is left.
    const files = await readdir(ts.modelStore);
    expect(files).toContain('tiny.mar');
    expect(files.filter((f) => f.endsWith('.part'))).toEqual([]);
    expect((await stat(join(ts.modelStore, 'tiny.mar'))).size).toBe((await stat(tiny.path)).size);
  });

  it('answers 409 in JSON for a second registration, served from the peer cache', async () => {
    const { status, body } = await register(`file_name=${encodeURIComponent('team a/tiny.mar')}`);
    expect(status).toBe(409);
    expect(body.Status).toMatch(/already registered/);
    expect(body.CacheHit).toBe(true);
    expect(body.LocalHit).toBe(true);
    expect(await listModels()).toContain('tiny');
  });

  it('the registered model scales and answers inference with label scores, highest first', async () => {
    const scale = await fetch(`${ts.managementURL}/models/tiny?min_worker=1`, {
      method: 'PUT',
      headers: ts.managementAuth(),
    });
    expect(scale.status).toBe(202);
    await waitFor(
      'a READY worker',
      async () => {
        const res = await fetch(`${ts.managementURL}/models/tiny`, {
          headers: ts.managementAuth(),
          signal: AbortSignal.timeout(10_000),
        });
        const [d] = (await res.json()) as { workers: { status: string }[] }[];
        return d!.workers.some((w) => w.status === 'READY');
      },
      { timeoutMs: 180_000, intervalMs: 1_000 },
    );
    const form = new FormData();
    form.append('data', new Blob([Buffer.from('a tiny picture of a cat')]), 'cat.jpg');
    const res = await fetch(`${ts.inferenceURL}/predictions/tiny`, {
      method: 'POST',
      headers: ts.inferenceAuth(),
      body: form,
      signal: AbortSignal.timeout(60_000),
    });
    expect(res.status).toBe(200);
    const scores = (await res.json()) as Record<string, number>;
    expect(Object.keys(scores).sort()).toEqual([...LABELS].sort());
    const values = Object.values(scores);
    expect(values).toEqual([...values].sort((a, b) => b - a));
  });

  it('answers 404 in JSON for a missing object, and leaves nothing in the model store', async () => {
    const { status, body } = await register('file_name=team/missing.mar&model_name=missing');
    expect(status).toBe(404);
    // The daemon passes the origin's 404 on without its body: the status is all there is to explain.
    expect(body.Status).toMatch(
      /not found: the origin answered 404 through the peer proxy .*\(no body is passed on\)/,
    );
    expect(body.Status).not.toMatch(/X-Amz|Signature|peerload-root-secret/);
    expect(await readdir(ts.modelStore)).not.toContain('missing.mar');
  });

  it('answers 400 in JSON for url, path traversal and bad parameters', async () => {
    expect((await register('url=https://example.com/x.mar')).status).toBe(400);
    expect((await register(`file_name=${encodeURIComponent('../../etc/passwd')}`)).status).toBe(400);
    expect((await register(`file_name=${encodeURIComponent('/abs/x.mar')}`)).status).toBe(400);
    expect((await register('file_name=x.mar&batch_size=many')).status).toBe(400);
  });

  it('surfaces the proxy error type on 502', async () => {
    proxy.failNext(1, 'dfdaemon');
    const { status, body } = await register('file_name=team/tiny.mar&model_name=other');
    expect(status).toBe(502);
    expect(body.ErrorType).toBe('dfdaemon');
  });

  it('answers 502 in JSON when the proxy is dead (configuration re-read without restart)', async () => {
    const deadPort = await freePort();
    await writeConfig(s3Config(`http://127.0.0.1:${deadPort}`));
    const { status, body } = await register(`file_name=${encodeURIComponent('team a/tiny.mar')}`);
    expect(status).toBe(502);
    expect(body.Status).toMatch(/unreachable/);
    await writeConfig(s3Config(proxy.url));
  });

  it('answers 500 naming the field when the configuration is invalid, never echoing a secret', async () => {
    const bad = s3Config(proxy.url);
    delete (bad['object_storage'] as Record<string, unknown>)['access_key'];
    await writeConfig(bad);
    const { status, body } = await register('file_name=team/tiny.mar');
    expect(status).toBe(500);
    expect(body.Status).toMatch(/object_storage\.access_key/);
    expect(body.Status).not.toContain(minio.secretKey);
    await writeConfig(s3Config(proxy.url));
  });

  it('answers 413 naming max_bytes for an archive above it, and changes nothing in the model store', async () => {
    await writeConfig(s3Config(proxy.url, { max_bytes: 100 }));
    const before = (await readdir(ts.modelStore)).sort();
    const tinyBefore = await stat(join(ts.modelStore, 'tiny.mar'));
    const { status, body } = await register(
      `file_name=${encodeURIComponent('team a/tiny.mar')}&model_name=too_large`,
    );
    expect(status, JSON.stringify(body)).toBe(413);
    expect(body.Status).toMatch(
      /is larger than max_bytes \(100 bytes\).*raise "max_bytes" in the plugin configuration/,
    );
    expect((await readdir(ts.modelStore)).sort()).toEqual(before);
    expect((await stat(join(ts.modelStore, 'tiny.mar'))).mtimeMs).toBe(tinyBefore.mtimeMs);
    expect(await listModels()).not.toContain('too_large');
    await writeConfig(s3Config(proxy.url));
  });

  it('a new version under another prefix with the same file name gets its own archive; both stay registered', async () => {
    const dir = join(work, 'v2');
    await mkdir(dir);
    const v2 = await buildModelArchive(dir, { modelName: 'tiny', version: '2.0' });
    await minio.client.send(
      new PutObjectCommand({ Bucket: BUCKET, Key: 'v2/tiny.mar', Body: createReadStream(v2.path) }),
    );
    const { status, body } = await register(`file_name=${encodeURIComponent('v2/tiny.mar')}`);
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.Status).toMatch(/^Model "tiny" Version: 2\.0 registered/);
    const files = await readdir(ts.modelStore);
    const distinct = files.filter((f) => /^p2p-[0-9a-f]{16}-tiny\.mar$/.test(f));
    expect(distinct).toHaveLength(1);
    // The first object's archive is untouched; the second is its own file.
    expect(Buffer.compare(await readFile(join(ts.modelStore, 'tiny.mar')), await readFile(tiny.path))).toBe(
      0,
    );
    expect(Buffer.compare(await readFile(join(ts.modelStore, distinct[0]!)), await readFile(v2.path))).toBe(
      0,
    );
    const res = await fetch(`${ts.managementURL}/models/tiny/all`, { headers: ts.managementAuth() });
    expect(res.status).toBe(200);
    const versions = ((await res.json()) as { modelVersion: string }[]).map((m) => m.modelVersion).sort();
    expect(versions).toEqual(['1.0', '2.0']);
    // Asked again, the second object is found under its own name (TorchServe: already registered).
    const again = await register(`file_name=${encodeURIComponent('v2/tiny.mar')}`);
    expect(again.status).toBe(409);
    // No third archive (the plugin's hidden records, .p2p-object.<archive>, say which object each one holds).
    const archives = (await readdir(ts.modelStore)).filter(
      (f) => f.endsWith('tiny.mar') && !f.startsWith('.'),
    );
    expect(archives.sort()).toEqual([...distinct, 'tiny.mar'].sort());
  });

  it('signs Azure Blob SAS URLs that Azurite accepts (abs)', async () => {
    await azurite.createContainer('models');
    await azurite.putBlob('models', 'nested/tiny-abs.mar', await readFile(tiny.path));
    await writeConfig({
      addr: proxy.url,
      object_storage: {
        type: 'abs',
        account_name: azurite.accountName,
        account_key: azurite.accountKey,
        container_name: 'models',
        endpoint: azurite.endpoint,
      },
    });
    const before = proxy.requests.length;
    const { status, body } = await register('file_name=nested/tiny-abs.mar&model_name=tiny_abs');
    expect(status, JSON.stringify(body)).toBe(200);
    expect(await listModels()).toContain('tiny_abs');
    const req = proxy.requests.slice(before)[0]!;
    expect(req.url).toContain('sig=');
    expect(req.headers['x-dragonfly-filtered-query-params']).toContain('sig');
    await writeConfig(s3Config(proxy.url));
  });

  it('downloads a 1 GiB object without growing the JVM heap by more than 64 MiB', async () => {
    const big = await buildLargeModelArchive(tiny, work, 'big', GiB);
    const size = (await stat(big.path)).size;
    await minio.client.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: 'big/big.mar',
        Body: createReadStream(big.path),
        ContentLength: size,
      }),
    );
    await rm(big.path);

    const t0 = Date.now();
    const {
      result: { status, body },
      heap: { base, retained, oldGrowth, peakGrowth, samples },
    } = await withHeapSampling(ts.pid, () => register('file_name=big/big.mar'));
    const seconds = (Date.now() - t0) / 1000;

    expect(status, JSON.stringify(body)).toBe(200);
    expect((await stat(join(ts.modelStore, 'big.mar'))).size).toBe(size);
    console.log(
      `[1 GiB] ${seconds.toFixed(1)} s; heap used ${(base / MiB).toFixed(1)} MiB, ` +
        `retained after GC ${(retained / MiB).toFixed(1)} MiB; ` +
        `old gen peak +${(oldGrowth / MiB).toFixed(1)} MiB; peak used +${(peakGrowth / MiB).toFixed(1)} MiB ` +
        `(${samples} jstat samples, serial GC, -Xmx384m)`,
    );
    expect(samples).toBeGreaterThan(5);
    expect(retained).toBeLessThan(64 * MiB);
    expect(oldGrowth).toBeLessThan(64 * MiB);
    expect(peakGrowth).toBeLessThan(64 * MiB);
    expect((await readdir(ts.modelStore)).filter((f) => f.endsWith('.part'))).toEqual([]);
  });
});
