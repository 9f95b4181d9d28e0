/**
 * Every lister against a hostile look-alike of its store (test/support/hostile-storage.ts): an endless page, a
 * 100 MB page, a server that never answers, a 1 MB error body of `a` and `://`, empty pages that never end. Each
 * ends in a ListError that says which bound and what to change, having read no more than the page cap, and the
 * heap does not grow by the page.
 */
import { generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ListError, listPrefix } from '../../src/storage/list.ts';
import { DEFAULT_MAX_PAGE_BYTES } from '../../src/storage/list-bounds.ts';
import type { StorageCredentials } from '../../src/storage/credentials.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import {
  HUGE_PAGE_BYTES,
  OK_KEYS,
  startHostileStorage,
  type HostileStorage,
} from '../support/hostile-storage.ts';

let storage: HostileStorage;
beforeAll(async () => {
  storage = await startHostileStorage();
});
afterAll(() => storage?.close());

const SECRET = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });

const kinds: {
  type: string;
  location: (bucket: string) => StorageLocation;
  credentials: StorageCredentials;
}[] = [
  {
    type: 's3',
    location: (bucket) => ({ type: 's3', bucket, endpoint: storage.url, pathStyle: true }),
    credentials: { type: 's3', accessKeyID: 'AKIDEXAMPLE', secretAccessKey: SECRET },
  },
  {
    type: 'gcs',
    location: (bucket) => ({ type: 'gcs', bucket, endpoint: storage.url }),
    credentials: {
      type: 'gcs',
      clientEmail: 'l@p.iam.gserviceaccount.com',
      privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    },
  },
  {
    type: 'abs',
    location: (container) => ({ type: 'abs', accountName: 'acct', container, endpoint: storage.url }),
    credentials: { type: 'abs', accountKey: Buffer.from(SECRET).toString('base64') },
  },
];

async function failure(p: Promise<unknown>): Promise<ListError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ListError);
  return err as ListError;
}

describe.each(kinds)('listing $type against a hostile server', ({ location, credentials }) => {
  it('lists a correct page', async () => {
    const listed = await listPrefix(location('good'), credentials, 'm/');
    expect(listed.map((o) => o.key)).toEqual(OK_KEYS.map((k) => `m/${k}`));
  });

  it('stops an endless page at the page cap', async () => {
    const before = storage.bytesSent();
    const err = await failure(listPrefix(location('endless'), credentials, 'm/', { maxPageBytes: 1 << 20 }));
    expect(err.failure).toBe('tooLarge');
    expect(err.message).toMatch(/page of the listing was larger than 1048576 bytes/);
    expect(err.message).toContain('objectStorage.prefix');
    // What the server managed to write before the client went: the cap and what the sockets buffer.
    expect(storage.bytesSent() - before).toBeLessThan(16 << 20);
  });

  it('stops a 100 MB page without reading it', async () => {
    const before = storage.bytesSent();
    const heap = process.memoryUsage().heapUsed;
    const err = await failure(listPrefix(location('huge'), credentials, 'm/'));
    expect(err.failure).toBe('tooLarge');
    expect(err.message).toContain(`larger than ${DEFAULT_MAX_PAGE_BYTES} bytes`);
    expect(storage.bytesSent() - before).toBeLessThan(HUGE_PAGE_BYTES / 4);
    expect(process.memoryUsage().heapUsed - heap).toBeLessThan(64 << 20);
  });

  it('gives up on a server that never answers', async () => {
    const started = performance.now();
    const err = await failure(listPrefix(location('silent'), credentials, 'm/', { requestTimeoutMs: 300 }));
    expect(err.failure).toBe('timedOut');
    expect(err.message).toMatch(/no complete answer within 300 ms/);
    expect(err.message).toContain(`objectStorage.endpoint ${storage.url}`);
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('bounds the whole listing in time too', async () => {
    const err = await failure(
      listPrefix(location('silent'), credentials, 'm/', { requestTimeoutMs: 60_000, timeoutMs: 300 }),
    );
    expect(err.failure).toBe('timedOut');
    expect(err.message).toMatch(/did not complete within 300 ms/);
  });

  it('stops pages that never end', async () => {
    const err = await failure(listPrefix(location('truncated'), credentials, 'm/', { maxPages: 5 }));
    expect(err.failure).toBe('tooLarge');
    expect(err.message).toMatch(/more than 5 pages/);
  });

  it('reads a 1 MB error body of a and :// into a short, redacted message', async () => {
    const started = performance.now();
    const err = await failure(listPrefix(location('errorbody'), credentials, 'm/'));
    expect(err.failure).toBe('failed');
    expect(err.message.length).toBeLessThan(1_200);
    expect(err.message).toContain('HTTP 500');
    expect(err.message).not.toContain(SECRET);
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it('caps the keys kept', async () => {
    const err = await failure(listPrefix(location('good'), credentials, 'm/', { maxListed: 1 }));
    expect(err.failure).toBe('tooLarge');
    expect(err.message).toMatch(/more than 1 objects/);
    const bytes = await failure(listPrefix(location('good'), credentials, 'm/', { maxKeyBytes: 10 }));
    expect(bytes.message).toMatch(/passed 10 characters/);
  });

  it("rethrows the caller's abort as it is", async () => {
    const reason = new Error('shutting down');
    const ac = new AbortController();
    setTimeout(() => ac.abort(reason), 100);
    await expect(listPrefix(location('silent'), credentials, 'm/', { signal: ac.signal })).rejects.toBe(
      reason,
    );
  });
});
