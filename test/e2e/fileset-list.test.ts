/**
 * Listing a model directory with the providers' list APIs against real servers: MinIO (S3 ListObjectsV2) and
 * Azurite (Azure List Blobs). A prefix of several files (nested, a sibling prefix, a folder placeholder) is listed
 * with sizes, selected with include/exclude, and every file gets the URL a signed download extends.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileSetEntries, selectFiles } from '../../src/storage/fileset.ts';
import { ListError, listPrefix } from '../../src/storage/list.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { startAzurite, type Azurite } from '../support/azurite.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';

const FILES: Record<string, string> = {
  'models/llama/config.json': '{"a":1}',
  'models/llama/model-00001-of-00002.safetensors': 'x'.repeat(3000),
  'models/llama/model-00002-of-00002.safetensors': 'y'.repeat(2000),
  'models/llama/tokenizer/tokenizer.json': 'z'.repeat(50),
  'models/llama/README.md': 'readme',
  'models/llama-other/x.bin': 'other',
};

const EXPECTED_PATHS = [
  'README.md',
  'config.json',
  'model-00001-of-00002.safetensors',
  'model-00002-of-00002.safetensors',
  'tokenizer/tokenizer.json',
];

async function download(url: string): Promise<string> {
  const res = await fetch(url);
  return `${res.status} ${await res.text()}`;
}

describe('listing a prefix on MinIO (S3 ListObjectsV2)', () => {
  let minio: MinIO;
  let location: StorageLocation;

  beforeAll(async () => {
    minio = await startMinIO();
    await minio.createBucket('weights');
    for (const [key, body] of Object.entries(FILES)) await minio.putObject('weights', key, body);
    await minio.putObject('weights', 'models/llama/', ''); // a console's folder placeholder
    location = minio.location('weights');
  });
  afterAll(async () => {
    await minio?.stop();
  });

  it('lists every object under the prefix with its size, and selects the files', async () => {
    const listed = await listPrefix(location, minio.credentials(), 'models/llama/');
    expect(listed.map((o) => o.key).sort()).toEqual([
      'models/llama/',
      ...EXPECTED_PATHS.map((p) => `models/llama/${p}`).sort(),
    ]);
    const files = selectFiles({ prefix: 'models/llama/' }, listed);
    expect(files.map((f) => f.path)).toEqual(EXPECTED_PATHS);
    expect(files.find((f) => f.path === 'model-00001-of-00002.safetensors')!.size).toBe(3000);
    const json = selectFiles({ prefix: 'models/llama/', include: ['**/*.json'] }, listed);
    expect(json.map((f) => f.path)).toEqual(['config.json', 'tokenizer/tokenizer.json']);
  });

  it('gives URLs that a signed download of each file extends', async () => {
    const listed = await listPrefix(location, minio.credentials(), 'models/llama/');
    const entries = fileSetEntries(location, selectFiles({ prefix: 'models/llama/' }, listed));
    for (const e of entries) {
      const signed = await signObjectURL(location, e.key, minio.credentials(), { expiresSeconds: 300 });
      expect(signed.objectURL).toBe(e.url);
      expect(await download(signed.url)).toBe(`200 ${FILES[e.key]}`);
    }
  });

  it('stops at maxListed, and says what failed without the secret', async () => {
    await expect(listPrefix(location, minio.credentials(), 'models/', { maxListed: 3 })).rejects.toThrow(
      'the prefix holds more than 3 objects: choose a narrower objectStorage.prefix',
    );
    const wrong = { ...minio.credentials(), secretAccessKey: 'wrong-secret-value-123' };
    const err = await listPrefix(location, wrong, 'models/').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ListError);
    expect((err as Error).message).toMatch(/^cannot list s3 weights prefix "models\/": .*Signature/);
    expect((err as Error).message).not.toContain('wrong-secret-value-123');
  });
});

describe('listing a prefix on Azurite (List Blobs)', () => {
  let azurite: Azurite;
  let location: StorageLocation;

  beforeAll(async () => {
    azurite = await startAzurite();
    await azurite.createContainer('weights');
    for (const [key, body] of Object.entries(FILES)) await azurite.putBlob('weights', key, body);
    location = {
      type: 'abs',
      accountName: azurite.accountName,
      container: 'weights',
      endpoint: azurite.endpoint,
    };
  });
  afterAll(async () => {
    await azurite?.stop();
  });

  it('lists every blob under the prefix with its size, and each URL downloads with a SAS', async () => {
    const credentials = { type: 'abs' as const, accountKey: azurite.accountKey };
    const listed = await listPrefix(location, credentials, 'models/llama/');
    const files = selectFiles({ prefix: 'models/llama/' }, listed);
    expect(files.map((f) => f.path)).toEqual(EXPECTED_PATHS);
    expect(files.find((f) => f.path === 'model-00002-of-00002.safetensors')!.size).toBe(2000);
    for (const e of fileSetEntries(location, files)) {
      const signed = await signObjectURL(location, e.key, credentials, { expiresSeconds: 300 });
      expect(signed.objectURL).toBe(e.url);
      expect(await download(signed.url)).toBe(`200 ${FILES[e.key]}`);
    }
  });
});
