/**
 * Signed URLs against real servers that verify signatures: MinIO (SigV4 presigned URLs, built by
 * scripts/setup-minio.sh) and Azurite (Azure Blob service SAS). A correct signature downloads the object; a
 * tampered one, one made with a wrong secret, or an expired one is refused with 403. Re-signing at another time
 * gives another URL but the same task id under the default filter.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ABSCredentials, S3Credentials } from '../../src/storage/credentials.ts';
import { effectiveFilter, type StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { startAzurite, type Azurite } from '../support/azurite.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';

const KEY = 'team a/résnet 18 (v2)+x.mar';
const BODY = randomBytes(64 * 1024);

async function get(url: string): Promise<{ status: number; body: Buffer }> {
  const res = await fetch(url);
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

/** Status and the error code of an XML error body (S3 and Azure both answer `<Error><Code>...`). */
async function refusal(url: string): Promise<string> {
  const res = await get(url);
  return `${res.status} ${/<Code>([^<]*)<\/Code>/.exec(res.body.toString('utf8'))?.[1] ?? '(no code)'}`;
}

/** The URL with the last character of one query parameter's value changed. */
function tamper(url: string, param: string): string {
  const u = new URL(url);
  const v = u.searchParams.get(param);
  if (!v) throw new Error(`no ${param} in the URL`);
  const last = v.at(-1)!;
  const replacement = /[0-9]/.test(last) ? (last === '0' ? '1' : '0') : last === 'A' ? 'B' : 'A';
  const tampered = url.replace(
    `${param}=${encodeURIComponent(v)}`,
    `${param}=${encodeURIComponent(v.slice(0, -1) + replacement)}`,
  );
  if (tampered === url) throw new Error('tampering changed nothing');
  return tampered;
}

/**
 * KEY signed twice, 10 s apart: both URLs download and differ, and the store's default filter (its signature's query
 * parameters left out) makes them, and the unsigned URL, one task id; without a filter they are two.
 */
async function expectTwoSigningsOneTask(location: StorageLocation, creds: S3Credentials | ABSCredentials) {
  const now = Date.now();
  const one = await signObjectURL(location, KEY, creds, { now: new Date(now - 10_000), expiresSeconds: 300 });
  const two = await signObjectURL(location, KEY, creds, { now: new Date(now), expiresSeconds: 300 });
  expect(one.url).not.toBe(two.url);
  expect((await get(one.url)).status).toBe(200);
  expect((await get(two.url)).status).toBe(200);
  const filter = effectiveFilter(location);
  expect(taskID({ url: one.url, filter })).toBe(taskID({ url: two.url, filter }));
  expect(taskID({ url: one.url, filter })).toBe(taskID({ url: one.objectURL, filter }));
  expect(taskID({ url: one.url, filter: [] })).not.toBe(taskID({ url: two.url, filter: [] }));
}

describe('S3 presigned URLs against MinIO (verifies SigV4)', () => {
  let minio: MinIO;
  let location: StorageLocation;
  let creds: S3Credentials;

  beforeAll(async () => {
    minio = await startMinIO();
    await minio.createBucket('models');
    await minio.putObject('models', KEY, BODY);
    location = minio.location('models');
    creds = minio.credentials();
  });
  afterAll(async () => {
    await minio?.stop();
  });

  it('downloads the object with a presigned URL (200, exact bytes)', async () => {
    const signed = await signObjectURL(location, KEY, creds, { expiresSeconds: 300 });
    expect(
      signed.url.startsWith(`${minio.endpoint}/models/team%20a/r%C3%A9snet%2018%20%28v2%29%2Bx.mar?`),
    ).toBe(true);
    const res = await get(signed.url);
    expect(res.status).toBe(200);
    expect(res.body.equals(BODY)).toBe(true);
  });

  it('refuses the unsigned URL, a tampered signature, a wrong secret and an expired URL (403)', async () => {
    const signed = await signObjectURL(location, KEY, creds, { expiresSeconds: 300 });
    expect(await refusal(signed.objectURL)).toBe('403 AccessDenied');
    expect(await refusal(tamper(signed.url, 'X-Amz-Signature'))).toBe('403 SignatureDoesNotMatch');
    const wrong = await signObjectURL(
      location,
      KEY,
      { ...creds, secretAccessKey: `${minio.secretKey}-wrong` },
      {
        expiresSeconds: 300,
      },
    );
    expect(await refusal(wrong.url)).toBe('403 SignatureDoesNotMatch');
    const expired = await signObjectURL(location, KEY, creds, {
      now: new Date(Date.now() - 3_600_000),
      expiresSeconds: 60,
    });
    expect(await refusal(expired.url)).toBe('403 AccessDenied');
  });

  it('two signings at different times: both download, different URLs, one task id with the default filter', () =>
    expectTwoSigningsOneTask(location, creds));
});

describe('Azure Blob SAS URLs against Azurite (verifies SAS)', () => {
  let azurite: Azurite;
  let location: StorageLocation;
  let creds: ABSCredentials;

  beforeAll(async () => {
    azurite = await startAzurite();
    await azurite.createContainer('models');
    await azurite.putBlob('models', KEY, BODY);
    location = {
      type: 'abs',
      accountName: azurite.accountName,
      container: 'models',
      endpoint: azurite.endpoint,
    };
    creds = { type: 'abs', accountKey: azurite.accountKey };
  });
  afterAll(async () => {
    await azurite?.stop();
  });

  it('downloads the blob with a SAS URL (200, exact bytes)', async () => {
    const signed = await signObjectURL(location, KEY, creds, { expiresSeconds: 300 });
    expect(signed.url.startsWith(`${azurite.endpoint}/devstoreaccount1/models/team%20a/`)).toBe(true);
    const res = await get(signed.url);
    expect(res.status).toBe(200);
    expect(res.body.equals(BODY)).toBe(true);
  });

  it('refuses the unsigned URL, a tampered sig, a wrong account key and an expired SAS (403)', async () => {
    const signed = await signObjectURL(location, KEY, creds, { expiresSeconds: 300 });
    expect(await refusal(signed.objectURL)).toBe('403 AuthorizationFailure');
    expect(await refusal(tamper(signed.url, 'sig'))).toBe('403 AuthorizationFailure');
    const wrongKey = Buffer.from(azurite.accountKey, 'base64');
    wrongKey[0] = wrongKey[0]! ^ 0xff;
    const wrong = await signObjectURL(
      location,
      KEY,
      { type: 'abs', accountKey: wrongKey.toString('base64') },
      {
        expiresSeconds: 300,
      },
    );
    expect(await refusal(wrong.url)).toBe('403 AuthorizationFailure');
    const expired = await signObjectURL(location, KEY, creds, {
      now: new Date(Date.now() - 3_600_000),
      expiresSeconds: 60,
    });
    expect(await refusal(expired.url)).toBe('403 AuthorizationFailure');
  });

  it('two signings at different times: both download, different URLs, one task id with the default filter', () =>
    expectTwoSigningsOneTask(location, creds));
});
