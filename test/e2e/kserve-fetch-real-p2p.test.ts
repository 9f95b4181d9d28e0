/**
 * KServe's storage-initializer contract on the REAL Dragonfly network (dfdaemon 1.4.2) with MinIO as the
 * origin behind a counting proxy (test/support/real-network-bed.ts): `peerload fetch s3://... /mnt/models` run
 * as KServe runs its init container (the two arguments, the credentials in KServe's environment variables, the
 * S3 endpoint on loopback allowed by the admin's flag), on two "pods" each through its own node peer:
 *   - a prefix lands as its tree directly under the destination (an existing mount point, as KServe's emptyDir),
 *     a sibling prefix and an empty object left out, nothing of the staging left behind;
 *   - a single object lands as that file; a single .tar.gz is extracted, the archive removed;
 *   - every file is on the task the operator's preheat of the same prefix names (objecturl + credentials' tag): a
 *     request with the preheat's identity on the first pod's node is a local hit with that id;
 *   - each object above the daemon's 4 MiB minimum piece length crossed from MinIO once for both pods.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ProxyAgent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { create as createTar } from 'tar';
import { runKServe } from '../../src/cli/fetch-kserve.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { fileSetEntries } from '../../src/storage/fileset.ts';
import { effectiveFilter } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { filterHeaders, TAG_HEADER } from '../../src/storage/taskid.ts';
import { startRealNetworkBed, type RealNetworkBed } from '../support/real-network-bed.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';

const BUCKET = fileBucket('kserve-models');
// Above the daemon's 4 MiB minimum piece length: the content travels between peers.
const SHARD = randomBytes((5 << 20) + 1234);
const SINGLE = randomBytes((4 << 20) + 4321 + 1024 * 1024);
const PREFIX = {
  'models/llm/config.json': Buffer.from('{"model_type":"llama"}'),
  'models/llm/model.safetensors': SHARD,
  'models/llm/tokenizer/tokenizer.json': Buffer.from('{"version":"1.0"}'),
  // KServe's initializer skips empty objects (folder markers).
  'models/llm/empty.txt': Buffer.alloc(0),
  'models/llm-v2/other.bin': Buffer.from('not this model'),
};

let bed: RealNetworkBed;
let env: Record<string, string>;

beforeAll(async () => {
  bed = await startRealNetworkBed({
    prefix: 'kserve-fetch',
    bucket: BUCKET,
    network: await sharedDragonfly(inject('dragonflyService'), 2),
  });
  const { minio, origin, work: dir } = bed;
  for (const [key, body] of Object.entries(PREFIX)) await minio.putObject(BUCKET, key, body);
  await minio.putObject(BUCKET, 'models/sklearn/model.joblib', SINGLE);
  const src = join(dir, 'archive-src');
  await mkdir(join(src, '1'), { recursive: true });
  await writeFile(join(src, 'config.pbtxt'), 'name: "m"');
  await writeFile(join(src, '1', 'model.onnx'), 'onnx bytes');
  await createTar({ gzip: true, cwd: src, file: join(dir, 'model.tar.gz') }, ['config.pbtxt', '1']);
  await minio.putObject(BUCKET, 'models/triton/model.tar.gz', await readFile(join(dir, 'model.tar.gz')));
  // What KServe's credential builder puts into the init container from an S3 Secret annotated with the endpoint.
  env = {
    AWS_ACCESS_KEY_ID: minio.accessKey,
    AWS_SECRET_ACCESS_KEY: minio.secretKey,
    AWS_ENDPOINT_URL: origin.url,
    S3_ENDPOINT: origin.url.replace(/^http:\/\//, ''),
    S3_USE_HTTPS: '0',
    AWS_DEFAULT_REGION: minio.region,
  };
  await bed.network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await bed?.stop();
  forgetSecrets();
});

/** One pod's init container: `peerload fetch` with KServe's two arguments, through node peer `i`. */
async function pod(i: number, uri: string, name: string) {
  const dest = join(bed.work, name, `pod-${i}`, 'mnt', 'models');
  // KServe's emptyDir: the destination exists (a mount point) before the init container starts.
  await mkdir(dest, { recursive: true });
  const out: string[] = [];
  const err: string[] = [];
  const code = await runKServe(
    [
      '--proxy',
      bed.network.peers[i]!.proxyURL,
      '--allowed-storage-hosts',
      'http://127.0.0.1',
      '--min-free-bytes',
      '0',
      '--log-level',
      'warn',
      uri,
      dest,
    ],
    { out: (l) => out.push(l), err: (l) => err.push(l) },
    env,
  );
  expect(err.join('\n')).toBe('');
  expect(code).toBe(0);
  console.log(`[kserve] pod ${i}: ${out.join(' ')}`);
  return { dest, line: out.join('\n') };
}

/** Body bytes MinIO sent for `key` (the daemons' 1-byte probes aside). */
const originBytes = (key: string) =>
  bed.origin.requests
    .filter(
      (r) => r.method === 'GET' && r.url.split('?')[0] === `/${BUCKET}/${key}` && r.range !== 'bytes=0-0',
    )
    .reduce((s, r) => s + r.bytes, 0);

describe('peerload fetch as KServe storage initializer on the real Dragonfly network', () => {
  it('a prefix on two pods: the tree under /mnt/models, the preheat tasks, the shard read from MinIO once', async () => {
    const uri = `s3://${BUCKET}/models/llm`;
    const first = await pod(0, uri, 'prefix');
    const second = await pod(1, uri, 'prefix');
    for (const p of [first, second]) {
      expect(p.line).toMatch(
        /: 3 files, \d+ bytes into .* \(\d+ local hits, 3 of 3 on their expected tasks\)$/,
      );
      expect((await readdir(p.dest, { recursive: true })).sort()).toEqual([
        'config.json',
        'model.safetensors',
        'tokenizer',
        'tokenizer/tokenizer.json',
      ]);
      for (const rel of ['config.json', 'model.safetensors', 'tokenizer/tokenizer.json'])
        expect(await readFile(join(p.dest, rel))).toEqual(PREFIX[`models/llm/${rel}` as keyof typeof PREFIX]);
    }
    const shardBytes = originBytes('models/llm/model.safetensors');
    console.log(
      `[kserve] model.safetensors (${SHARD.length} bytes): MinIO body ${shardBytes} bytes for 2 pods`,
    );
    expect(shardBytes).toBe(SHARD.length);

    // The operator's preheat of this prefix names the same task: a request with its identity is a local hit.
    const { location, tag } = bed;
    const [entry] = fileSetEntries(
      location,
      [{ key: 'models/llm/model.safetensors', path: 'model.safetensors' }],
      { tag },
    );
    const signed = await signObjectURL(location, entry!.key, bed.minio.credentials(), {
      expiresSeconds: 600,
    });
    const agent = new ProxyAgent(bed.network.peers[0]!.proxyURL);
    try {
      const res = await request(signed.url, {
        dispatcher: agent,
        headers: {
          'X-Dragonfly-Use-P2P': 'true',
          [TAG_HEADER]: tag,
          ...filterHeaders(effectiveFilter(location)),
        },
      });
      await res.body.arrayBuffer();
      expect(res.headers['x-dragonfly-task-id']).toBe(entry!.taskID);
      expect(res.headers['x-dragonfly-task-download-finished']).toBe('true');
    } finally {
      await agent.close();
    }
    expect(originBytes('models/llm/model.safetensors')).toBe(SHARD.length);
    expect(originBytes('models/llm-v2/other.bin')).toBe(0);
  });

  it('a single object on two pods lands as that file, read from MinIO once', async () => {
    const uri = `s3://${BUCKET}/models/sklearn/model.joblib`;
    const first = await pod(0, uri, 'single');
    const second = await pod(1, uri, 'single');
    for (const p of [first, second]) {
      expect(p.line).toContain('1 of 1 on their expected tasks');
      expect(await readdir(p.dest)).toEqual(['model.joblib']);
      expect(await readFile(join(p.dest, 'model.joblib'))).toEqual(SINGLE);
    }
    expect(originBytes('models/sklearn/model.joblib')).toBe(SINGLE.length);
  });

  it('a single .tar.gz is extracted into /mnt/models and the archive removed, as KServe does', async () => {
    const p = await pod(0, `s3://${BUCKET}/models/triton/model.tar.gz`, 'archive');
    expect(p.line).toContain(': 2 files,');
    expect((await readdir(p.dest, { recursive: true })).sort()).toEqual([
      '1',
      '1/model.onnx',
      'config.pbtxt',
    ]);
    expect(await readFile(join(p.dest, '1', 'model.onnx'), 'utf8')).toBe('onnx bytes');
  });
});
