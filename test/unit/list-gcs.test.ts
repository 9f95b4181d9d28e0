/**
 * Listing a gcs prefix through @google-cloud/storage against a small fake of the JSON API's objects.list (no GCS
 * emulator is part of the test set-up): pages followed by pageToken, sizes read from their string form.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeNow, listenOnLoopback } from '../support/ports.ts';
import { selectFiles } from '../../src/storage/fileset.ts';
import { ListError, listPrefix } from '../../src/storage/list.ts';
import type { GCSCredentials } from '../../src/storage/credentials.ts';

const OBJECTS = Array.from({ length: 5 }, (_, i) => ({ name: `m/shard-${i}.bin`, size: String(100 + i) }));
const seen: string[] = [];
let url: string;
const server = createServer((req, res) => {
  const u = new URL(req.url ?? '/', 'http://x');
  seen.push(u.pathname + '?' + u.searchParams.toString());
  if (u.pathname !== '/storage/v1/b/weights/o') {
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end('{"error":{"code":404,"message":"no bucket"}}');
    return;
  }
  // Two objects per page whatever maxResults asks, so the client must follow pageToken.
  const start = Number(u.searchParams.get('pageToken') ?? '0');
  const items = OBJECTS.filter((o) => o.name.startsWith(u.searchParams.get('prefix') ?? '')).slice(
    start,
    start + 2,
  );
  const next = start + 2 < OBJECTS.length ? { nextPageToken: String(start + 2) } : {};
  res
    .writeHead(200, { 'content-type': 'application/json' })
    .end(JSON.stringify({ kind: 'storage#objects', items, ...next }));
});

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const credentials: GCSCredentials = {
  type: 'gcs',
  clientEmail: 'lister@project.iam.gserviceaccount.com',
  privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};

beforeAll(async () => {
  url = await listenOnLoopback(server);
});
afterAll(() => closeNow(server));

describe('listPrefix on gcs', () => {
  it('follows the pages and reads sizes', async () => {
    const listed = await listPrefix({ type: 'gcs', bucket: 'weights', endpoint: url }, credentials, 'm/');
    expect(listed).toEqual(OBJECTS.map((o) => ({ key: o.name, size: Number(o.size) })));
    expect(seen.filter((s) => s.startsWith('/storage/v1/b/weights/o'))).toHaveLength(3);
    expect(seen[0]).toContain('prefix=m%2F');
    expect(selectFiles({ prefix: 'm/', include: ['shard-[0-1].bin'] }, listed).map((f) => f.path)).toEqual([
      'shard-0.bin',
      'shard-1.bin',
    ]);
  });

  it('says which bucket and prefix failed', async () => {
    const err = await listPrefix({ type: 'gcs', bucket: 'other', endpoint: url }, credentials, 'm/').catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ListError);
    expect((err as Error).message).toMatch(/^cannot list gcs other prefix "m\/": HTTP 404: check the bucket/);
    expect((err as Error).message).not.toContain('PRIVATE KEY');
  });
});
