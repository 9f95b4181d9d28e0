/**
 * Object-storage URLs, filters, task ids and signatures: the shared vectors (test/vectors/object-storage.json, also
 * read by the Java plugin's JUnit suite) and the providers' own published examples (AWS SigV4 presigned-URL
 * example, OSS V1 signature examples, Google's V4 signing conformance vectors).
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ObjectStorageType } from '../../src/api/objectstorage.ts';
import {
  credentialsFromSecretData,
  CredentialsError,
  type StorageCredentials,
} from '../../src/storage/credentials.ts';
import {
  DEFAULT_FILTERS,
  effectiveFilter,
  encodeKey,
  objectURL,
  type StorageLocation,
} from '../../src/storage/objecturl.ts';
import { ossSignature, ossStringToSign } from '../../src/storage/oss.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { canonicalURL, DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';
import { generateStorageVectors, VECTORS_PATH } from '../../scripts/gen-storage-vectors.ts';

interface TaskIDVariant {
  tag: string | null;
  application: string | null;
  pieceLength: number | null;
  taskID: string;
}
interface VectorCase {
  name: string;
  location: StorageLocation;
  key: string;
  credentials: string;
  now: string;
  expiresSeconds: number;
  objectURL: string;
  filter: string[];
  canonicalURL: string;
  taskIDs: TaskIDVariant[];
  signedURL: string;
  signedQuery: [string, string][];
  signedCanonicalURL: string;
  signedTaskID: string;
  signedTaskIDEqualsUnsigned: boolean;
}
interface Vectors {
  rules: string[];
  credentialSets: Record<string, Record<string, string>>;
  cases: VectorCase[];
}

const vectors = JSON.parse(
  readFileSync(new URL('../vectors/object-storage.json', import.meta.url), 'utf8'),
) as Vectors;

function creds(type: ObjectStorageType, set: string): StorageCredentials {
  return credentialsFromSecretData(type, vectors.credentialSets[set], { encoding: 'utf8' });
}

const nullToUndefined = <T>(v: T | null): T | undefined => (v === null ? undefined : v);

/**
 * @google-cloud/storage refuses an expiry already past by the wall clock, so signing at an old fixed clock needs a
 * fake `Date` (only Date: timers stay real).
 */
function atClock(iso: string): void {
  vi.useFakeTimers({ toFake: ['Date'], now: new Date(iso) });
}

afterEach(() => {
  vi.useRealTimers();
});

describe('shared vectors (test/vectors/object-storage.json)', () => {
  it('cover all four kinds, both s3 host styles, endpoint overrides and awkward keys', () => {
    const kinds = new Set(vectors.cases.map((c) => c.location.type));
    expect([...kinds].sort()).toEqual(['abs', 'gcs', 'oss', 's3']);
    const s3 = vectors.cases.filter((c) => c.location.type === 's3');
    expect(s3.some((c) => c.location.pathStyle === true)).toBe(true);
    expect(s3.some((c) => c.location.endpoint !== undefined && c.location.pathStyle !== true)).toBe(true);
    expect(
      vectors.cases.some((c) => / /.test(c.key) && /\//.test(c.key) && /[^\p{ASCII}]/u.test(c.key)),
    ).toBe(true);
    expect(vectors.rules.length).toBeGreaterThan(5);
  });

  describe.each(vectors.cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    it('object URL, filter, canonical URL and task ids', () => {
      expect(objectURL(c.location, c.key)).toBe(c.objectURL);
      expect(effectiveFilter(c.location)).toEqual(c.filter);
      expect(canonicalURL(c.objectURL, c.filter)).toBe(c.canonicalURL);
      for (const v of c.taskIDs) {
        const id = taskID({
          url: c.objectURL,
          filter: c.filter,
          tag: nullToUndefined(v.tag),
          application: nullToUndefined(v.application),
          pieceLength: nullToUndefined(v.pieceLength),
        });
        expect(id, JSON.stringify(v)).toBe(v.taskID);
      }
      // The variants are distinct: tag, application and piece length each change the id.
      expect(new Set(c.taskIDs.map((v) => v.taskID)).size).toBe(c.taskIDs.length);
    });

    it('signed URL (fixed clock and credentials) and its task id', async () => {
      atClock(c.now);
      const signed = await signObjectURL(c.location, c.key, creds(c.location.type, c.credentials), {
        now: new Date(c.now),
        expiresSeconds: c.expiresSeconds,
      });
      expect(signed.url).toBe(c.signedURL);
      expect(signed.objectURL).toBe(c.objectURL);
      expect(signed.filter).toEqual(c.filter);
      expect(signed.expiresAt.getTime()).toBe(new Date(c.now).getTime() + c.expiresSeconds * 1000);
      const query = [...new URL(signed.url).searchParams];
      expect(query).toEqual(c.signedQuery);
      expect(canonicalURL(signed.url, c.filter)).toBe(c.signedCanonicalURL);
      const signedID = taskID({ url: signed.url, filter: c.filter });
      expect(signedID).toBe(c.signedTaskID);
      expect(signedID === c.taskIDs[0]!.taskID).toBe(c.signedTaskIDEqualsUnsigned);
    });
  });

  it('with the default filter every signature parameter is filtered (oss OSSAccessKeyId included)', () => {
    for (const c of vectors.cases.filter((v) => v.location.filteredQueryParams === undefined)) {
      const kept = c.signedQuery.map(([k]) => k).filter((k) => !c.filter.includes(k));
      expect(kept, c.name).toEqual([]);
      expect(c.signedTaskIDEqualsUnsigned, c.name).toBe(true);
      expect(c.signedCanonicalURL, c.name).toBe(c.canonicalURL);
    }
  });
});

describe('signing at two different times', () => {
  const at1 = new Date('2026-01-15T08:00:00Z');
  const at2 = new Date('2026-01-15T09:30:00Z');
  const kinds: [ObjectStorageType, StorageLocation, string][] = [
    ['s3', { type: 's3', bucket: 'models', region: 'eu-west-1' }, 's3-session'],
    ['oss', { type: 'oss', bucket: 'models', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' }, 'oss'],
    ['gcs', { type: 'gcs', bucket: 'models' }, 'gcs'],
    ['abs', { type: 'abs', accountName: 'peerloadacct', container: 'models' }, 'abs'],
  ];
  it.each(kinds)(
    '%s: different URLs, equal task ids with the default filter, different with an empty filter',
    async (type, location, set) => {
      atClock(at1.toISOString());
      const key = 'team a/résnet 18.mar';
      const c = creds(type, set);
      const one = await signObjectURL(location, key, c, { now: at1, expiresSeconds: 3600 });
      const two = await signObjectURL(location, key, c, { now: at2, expiresSeconds: 3600 });
      expect(one.url).not.toBe(two.url);
      const filter = effectiveFilter(location);
      expect(taskID({ url: one.url, filter })).toBe(taskID({ url: two.url, filter }));
      expect(taskID({ url: one.url, filter, tag: 't', application: 'a' })).toBe(
        taskID({ url: two.url, filter, tag: 't', application: 'a' }),
      );
      expect(taskID({ url: one.url, filter: [] })).not.toBe(taskID({ url: two.url, filter: [] }));
      expect(taskID({ url: one.url, filter })).toBe(taskID({ url: one.objectURL, filter }));
    },
  );
});

describe('provider examples', () => {
  it('s3: AWS documentation presigned URL (examplebucket/test.txt, AKIAIOSFODNN7EXAMPLE)', async () => {
    const signed = await signObjectURL(
      { type: 's3', bucket: 'examplebucket', region: 'us-east-1', endpoint: 'https://s3.amazonaws.com' },
      'test.txt',
      {
        type: 's3',
        accessKeyID: 'AKIAIOSFODNN7EXAMPLE',
        secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      },
      { now: new Date('2013-05-24T00:00:00Z'), expiresSeconds: 86400 },
    );
    expect(signed.url).toBe(
      'https://examplebucket.s3.amazonaws.com/test.txt' +
        '?X-Amz-Algorithm=AWS4-HMAC-SHA256' +
        '&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request' +
        '&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host' +
        '&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404',
    );
  });

  it('oss: V1 header-signature example of the OSS documentation', () => {
    const stringToSign =
      'PUT\nODBGOERFMDMzQTczRUY3NUE3NzA5QzdFNUYzMDQxNEM=\ntext/html\nThu, 17 Nov 2005 18:49:58 GMT\n' +
      'x-oss-magic:abracadabra\nx-oss-meta-author:foo@bar.com\n/oss-example/nelson';
    expect(ossSignature('OtxrzxIsfpFjA7SwPzILwy8Bw21TLhquhboDYROV', stringToSign)).toBe(
      '26NBxoKdsyly4EDv6inkoDft/yA=',
    );
  });

  it('oss: V1 URL-signature example (Expires=1141889120, Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D)', async () => {
    expect(ossStringToSign('quotes', 'nelson', 1141889120)).toBe('GET\n\n\n1141889120\n/quotes/nelson');
    const signed = await signObjectURL(
      { type: 'oss', bucket: 'quotes', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' },
      'nelson',
      {
        type: 'oss',
        accessKeyID: '44CF9590006BF252F707',
        accessKeySecret: 'OtxrzxIsfpFjA7SwPzILwy8Bw21TLhquhboDYROV',
      },
      { now: new Date(1141889060_000), expiresSeconds: 60 },
    );
    expect(signed.url).toBe(
      'https://quotes.oss-cn-hangzhou.aliyuncs.com/nelson' +
        '?OSSAccessKeyId=44CF9590006BF252F707&Expires=1141889120&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D',
    );
  });

  // googleapis/conformance-tests storage/v1/v4_signatures.json: the GET cases without extra headers or query
  // parameters (the only form signObjectURL makes), signed with the repository's inactive dummy service account
  // (credentialSets.gcs of the shared vectors).
  const googleV4 = [
    {
      description: 'Simple GET',
      bucket: 'test-bucket',
      object: 'test-object',
      expiration: 10,
      timestamp: '2019-02-01T09:00:00Z',
      signature:
        '95e6a13d43a1d1962e667f17397f2b80ac9bdd1669210d5e08e0135df9dff4e56113485dbe429ca2266487b9d1796ebdee2d7cf682a6ef3bb9fbb4c351686fba90d7b621cf1c4eb1fdf126460dd25fa0837dfdde0a9fd98662ce60844c458448fb2b352c203d9969cb74efa4bdb742287744a4f2308afa4af0e0773f55e32e92973619249214b97283b2daa14195244444e33f938138d1e5f561088ce8011f4986dda33a556412594db7c12fc40e1ff3f1bedeb7a42f5bcda0b9567f17f65855f65071fabb88ea12371877f3f77f10e1466fff6ff6973b74a933322ff0949ce357e20abe96c3dd5cfab42c9c83e740a4d32b9e11e146f0eb3404d2e975896f74',
    },
    {
      description: 'Vary expiration and timestamp',
      bucket: 'test-bucket',
      object: 'test-object',
      expiration: 20,
      timestamp: '2019-03-01T09:00:00Z',
      signature:
        '9669ed5b10664dc594c758296580662912cf4bcc5a4ba0b6bf055bcbf6f34eed7bdad664f534962174a924741a0c273a4f67bc1847cef20192a6beab44223bd9d4fbbd749c407b79997598c30f82ddc269ff47ec09fa3afe74e00616d438df0d96a7d8ad0adacfad1dc3286f864d924fe919fb0dce45d3d975c5afe8e13af2db9cc37ba77835f92f7669b61e94c6d562196c1274529e76cfff1564cc2cad7d5387dc8e12f7a5dfd925685fe92c30b43709eee29fa2f66067472cee5423d1a3a4182fe8cea75c9329d181dc6acad7c393cd04f8bf5bc0515127d8ebd65d80c08e19ad03316053ea60033fd1b1fd85a69c576415da3bf0a3718d9ea6d03e0d66f0',
    },
    {
      description: 'Vary bucket and object',
      bucket: 'test-bucket2',
      object: 'test-object2',
      expiration: 10,
      timestamp: '2019-02-01T09:00:00Z',
      signature:
        '36e3d58dfd3ec1d2dd2f24b5ee372a71e811ffaa2162a2b871d26728d0354270bc116face87127532969c4a3967ed05b7309af741e19c7202f3167aa8c2ac420b61417d6451442bb91d7c822cd17be8783f01e05372769c88913561d27e6660dd8259f0081a71f831be6c50283626cbf04494ac10c394b29bb3bce74ab91548f58a37118a452693cf0483d77561fc9cac8f1765d2c724994cca46a83517a10157ee0347a233a2aaeae6e6ab5e204ff8fc5f54f90a3efdb8301d9fff5475d58cd05b181affd657f48203f4fb133c3a3d355b8eefbd10d5a0a5fd70d06e9515460ad74e22334b2cba4b29cae4f6f285cdb92d8f3126d7a1479ca3bdb69c207d860',
    },
  ];
  it.each(googleV4)('gcs: Google V4 conformance "$description"', async (t) => {
    atClock(t.timestamp);
    const signed = await signObjectURL({ type: 'gcs', bucket: t.bucket }, t.object, creds('gcs', 'gcs'), {
      now: new Date(t.timestamp),
      expiresSeconds: t.expiration,
    });
    const day = t.timestamp.slice(0, 10).replaceAll('-', '');
    const stamp = t.timestamp.replaceAll('-', '').replaceAll(':', '');
    expect(signed.url).toBe(
      `https://storage.googleapis.com/${t.bucket}/${t.object}?X-Goog-Algorithm=GOOG4-RSA-SHA256` +
        `&X-Goog-Credential=test-iam-credentials%40dummy-project-id.iam.gserviceaccount.com%2F${day}%2Fauto%2Fstorage%2Fgoog4_request` +
        `&X-Goog-Date=${stamp}&X-Goog-Expires=${t.expiration}&X-Goog-SignedHeaders=host&X-Goog-Signature=${t.signature}`,
    );
  });
});

describe('object URLs and filters', () => {
  it('encodes each key segment per RFC 3986 and keeps slashes', () => {
    expect(encodeKey("a b/ü/!'()*~._-/x+y=z&?#%")).toBe(
      'a%20b/%C3%BC/%21%27%28%29%2A~._-/x%2By%3Dz%26%3F%23%25',
    );
    expect(encodeKey('a//b/')).toBe('a//b/');
    expect(() => encodeKey('bad\ud800')).toThrow(/well-formed/);
  });

  it('rejects locations without the fields their kind needs, and empty keys', () => {
    expect(() => objectURL({ type: 's3' }, 'k')).toThrow('bucket is required for s3');
    expect(() => objectURL({ type: 'oss', bucket: 'b' }, 'k')).toThrow('endpoint is required for oss');
    expect(() => objectURL({ type: 'gcs' }, 'k')).toThrow('bucket is required for gcs');
    expect(() => objectURL({ type: 'abs', accountName: 'acct' }, 'k')).toThrow(
      'container is required for abs',
    );
    expect(() => objectURL({ type: 'abs', container: 'c' }, 'k')).toThrow('accountName is required for abs');
    expect(() => objectURL({ type: 's3', bucket: 'b' }, '')).toThrow('must not be empty');
    expect(() => objectURL({ type: 's3', bucket: 'b', endpoint: 'ftp://x' }, 'k')).toThrow(
      /endpoint must be/,
    );
  });

  it('default filters: the seed lists (s3 plus the session token), the X-Goog names, the SAS names', () => {
    expect(DEFAULT_FILTERS.s3.slice(0, 6)).toEqual([
      'X-Amz-Algorithm',
      'X-Amz-Credential',
      'X-Amz-Date',
      'X-Amz-Expires',
      'X-Amz-SignedHeaders',
      'X-Amz-Signature',
    ]);
    expect(DEFAULT_FILTERS.s3).toContain('X-Amz-Security-Token');
    expect(DEFAULT_FILTERS.oss).toEqual(['OSSAccessKeyId', 'Expires', 'Signature']);
    expect(DEFAULT_FILTERS.gcs).toHaveLength(6);
    expect(DEFAULT_FILTERS.gcs.every((n) => n.startsWith('X-Goog-'))).toBe(true);
    for (const n of ['sv', 'se', 'st', 'sr', 'sp', 'spr', 'sig', 'skoid', 'sdd'])
      expect(DEFAULT_FILTERS.abs).toContain(n);
    // An explicit empty list is honoured (no filtering), absent means the default.
    expect(effectiveFilter({ type: 's3', filteredQueryParams: [] })).toEqual([]);
    expect(effectiveFilter({ type: 'gcs' })).toEqual([...DEFAULT_FILTERS.gcs]);
  });
});

describe('signObjectURL arguments', () => {
  const s3 = { type: 's3', accessKeyID: 'AKID', secretAccessKey: 'SECRET' } as const;
  it('refuses credentials of another kind, bad expiries and over-long s3 validity', async () => {
    await expect(
      signObjectURL({ type: 'gcs', bucket: 'b' }, 'k', s3, { expiresSeconds: 60 }),
    ).rejects.toThrow(CredentialsError);
    await expect(signObjectURL({ type: 's3', bucket: 'b' }, 'k', s3, { expiresSeconds: 0 })).rejects.toThrow(
      /positive integer/,
    );
    await expect(
      signObjectURL({ type: 's3', bucket: 'b' }, 'k', s3, { expiresSeconds: 604_801 }),
    ).rejects.toThrow(/at most 604800/);
  });

  it('defaults `now` to the current time', async () => {
    const before = Date.now();
    const signed = await signObjectURL({ type: 's3', bucket: 'b' }, 'k', s3, { expiresSeconds: 60 });
    expect(signed.expiresAt.getTime()).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 60_000);
    expect(signed.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 60_000);
  });
});

describe('credentials from a Secret', () => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  const SECRET = 'TOP-SECRET-VALUE-9f2c';

  it('decodes base64 data by default and reads the optional session token', () => {
    expect(credentialsFromSecretData('s3', { access_key: b64('AK'), secret_key: b64(SECRET) })).toEqual({
      type: 's3',
      accessKeyID: 'AK',
      secretAccessKey: SECRET,
      sessionToken: undefined,
    });
    const withToken = credentialsFromSecretData('s3', {
      access_key: b64('AK'),
      secret_key: b64(SECRET),
      session_token: b64('TOKEN'),
    });
    expect(withToken.type === 's3' && withToken.sessionToken).toBe('TOKEN');
    expect(
      credentialsFromSecretData(
        'oss',
        { access_key_id: 'id', access_key_secret: SECRET },
        { encoding: 'utf8' },
      ),
    ).toEqual({ type: 'oss', accessKeyID: 'id', accessKeySecret: SECRET });
    expect(creds('gcs', 'gcs')).toMatchObject({
      type: 'gcs',
      clientEmail: 'test-iam-credentials@dummy-project-id.iam.gserviceaccount.com',
      projectID: 'dummy-project-id',
    });
  });

  const failures: [string, ObjectStorageType, Record<string, string> | undefined, string, RegExp][] = [
    ['no data at all', 's3', undefined, 'access_key', /has no key "access_key"/],
    ['missing secret_key', 's3', { access_key: b64('AK') }, 'secret_key', /has no key "secret_key"/],
    [
      'empty secret_key',
      's3',
      { access_key: b64('AK'), secret_key: '' },
      'secret_key',
      /has no key "secret_key"/,
    ],
    [
      'secret_key not base64',
      's3',
      { access_key: b64('AK'), secret_key: `${SECRET}!!` },
      'secret_key',
      /not valid base64/,
    ],
    [
      'missing access_key_secret',
      'oss',
      { access_key_id: b64('id') },
      'access_key_secret',
      /"access_key_secret"/,
    ],
    ['missing account_key', 'abs', {}, 'account_key', /has no key "account_key"/],
    [
      'account_key not a base64 key',
      'abs',
      { account_key: b64(`${SECRET}*`) },
      'account_key',
      /not a base64 account key/,
    ],
    ['missing service_account.json', 'gcs', {}, 'service_account.json', /has no key "service_account.json"/],
    [
      'service account not JSON (its text would be quoted by JSON.parse)',
      'gcs',
      { 'service_account.json': b64(`{"private_key": "${SECRET}", oops`) },
      'service_account.json',
      /not valid JSON/,
    ],
    [
      'service account without private_key',
      'gcs',
      { 'service_account.json': b64(JSON.stringify({ client_email: 'a@b', token: SECRET })) },
      'service_account.json',
      /no string field "private_key"/,
    ],
    [
      'service account private_key not a key',
      'gcs',
      { 'service_account.json': b64(JSON.stringify({ client_email: 'a@b', private_key: SECRET })) },
      'service_account.json',
      /"private_key" is not an RSA private key/,
    ],
  ];
  it.each(failures)('%s: names the key, never the value', (_what, type, data, key, message) => {
    let error: unknown;
    try {
      credentialsFromSecretData(type, data, { secretName: 'model-store' });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(CredentialsError);
    const e = error as CredentialsError;
    expect(e.key).toBe(key);
    expect(e.message).toMatch(message);
    expect(e.message).toContain('secret "model-store"');
    expect(e.message).not.toContain(SECRET);
    expect(JSON.stringify(e)).not.toContain(SECRET);
    expect(String(e.stack)).not.toContain(SECRET);
  });
});

describe('oss default filter (OSSAccessKeyId, Expires, Signature)', () => {
  const location: StorageLocation = {
    type: 'oss',
    bucket: 'models',
    endpoint: 'https://oss-cn-hangzhou.aliyuncs.com',
  };
  const now = new Date('2026-01-15T08:00:00Z');

  it('keeps preheat and download on one task id across an access-key rotation', async () => {
    const before = await signObjectURL(
      location,
      'resnet-18.mar',
      { type: 'oss', accessKeyID: 'OLDKEYID', accessKeySecret: 'old-secret' },
      { now, expiresSeconds: 3600 },
    );
    const after = await signObjectURL(
      location,
      'resnet-18.mar',
      { type: 'oss', accessKeyID: 'NEWKEYID', accessKeySecret: 'new-secret' },
      { now: new Date(now.getTime() + 60_000), expiresSeconds: 3600 },
    );
    const filter = effectiveFilter(location);
    expect(taskID({ url: before.url, filter })).toBe(taskID({ url: after.url, filter }));
    expect(taskID({ url: before.url, filter })).toBe(taskID({ url: before.objectURL, filter }));
    // A filter of the V1 signature's two names only would have kept the key id in the task id.
    const seedFilter = ['Expires', 'Signature'];
    expect(taskID({ url: before.url, filter: seedFilter })).not.toBe(
      taskID({ url: after.url, filter: seedFilter }),
    );
  });

  it('is a subset of the peer daemon default filter, as every kind default is', () => {
    for (const type of Object.keys(DEFAULT_FILTERS) as ObjectStorageType[]) {
      if (type === 'abs') continue; // SAS names are not in the daemon default (they are short and generic)
      for (const name of DEFAULT_FILTERS[type]) expect(DEFAULT_FILTERED_QUERY_PARAMS, type).toContain(name);
    }
  });
});

describe('generated vectors (scripts/gen-storage-vectors.ts)', () => {
  it('regenerating from src/storage yields exactly the committed file', async () => {
    const committed = readFileSync(VECTORS_PATH, 'utf8');
    const generated = await generateStorageVectors();
    // A failure here means src/storage changed: run `node scripts/gen-storage-vectors.ts` (and the JUnit suite).
    expect(generated === committed, 'test/vectors/object-storage.json is out of date').toBe(true);
    expect(generated).toBe(committed);
  });
});
