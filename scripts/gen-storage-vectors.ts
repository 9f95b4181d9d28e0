/**
 * Generates test/vectors/object-storage.json, the object-storage vectors shared by the TypeScript suite
 * (test/unit/storage-vectors.test.ts) and the Java plugin's JUnit suite, from src/storage.
 *
 *   node scripts/gen-storage-vectors.ts           rewrite the file
 *   node scripts/gen-storage-vectors.ts --check   exit 1 when the file differs from what the code produces
 *
 * Deterministic: fixed cases, fixed clocks, public example credentials, output formatted by prettier with the
 * repository's settings. test/unit/storage-vectors.test.ts checks that regenerating yields the committed file, so
 * the vectors cannot drift from the code (change the code, run this, and the Java suite sees the new vectors).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { format, resolveConfig } from 'prettier';
import type { ObjectStorageType } from '../src/api/objectstorage.ts';
import { credentialsFromSecretData } from '../src/storage/credentials.ts';
import { effectiveFilter, objectURL, type StorageLocation } from '../src/storage/objecturl.ts';
import { signObjectURL } from '../src/storage/sign.ts';
import { canonicalURL, taskID } from '../src/storage/taskid.ts';

export const VECTORS_PATH = fileURLToPath(new URL('../test/vectors/object-storage.json', import.meta.url));

const DESCRIPTION =
  "Object-storage URL, filter and task-id vectors shared by the TypeScript suite (test/unit/storage-vectors.test.ts) and the Java plugin's JUnit suite. Generated from src/storage by the TypeScript implementation (scripts/gen-storage-vectors.ts) and checked by both sides; s3, oss and gcs anchors (reference field) are the providers' published examples.";

const RULES = [
  'KEY ENCODING: split the key on "/"; percent-encode each segment per RFC 3986 over its UTF-8 bytes (unreserved A-Z a-z 0-9 - . _ ~ kept, everything else %XX with uppercase hex); join with "/". Empty segments are kept (a leading "/" gives "//" after the bucket).',
  'ENDPOINT: used as written minus trailing "/". Host forms take the scheme (lowercased) and the authority host[:port] as written; any endpoint path is ignored there.',
  's3: no endpoint -> https://{bucket}.s3.{region}.amazonaws.com/{key} (region default us-east-1); endpoint + pathStyle true -> {endpoint}/{bucket}/{key}; endpoint without pathStyle -> {scheme}://{bucket}.{authority}/{key}.',
  'oss: {scheme}://{bucket}.{authority of endpoint}/{key} (endpoint required).',
  'gcs: https://storage.googleapis.com/{bucket}/{key}, or {endpoint}/{bucket}/{key} with an endpoint (emulators).',
  'abs: no endpoint -> https://{accountName}.blob.core.windows.net/{container}/{key}; endpoint whose host starts with "{accountName}." -> {endpoint}/{container}/{key}; any other endpoint (Azurite, IP) -> {endpoint}/{accountName}/{container}/{key}.',
  'SIGNED URL = objectURL + "?" + the signature query parameters only (names and values RFC 3986 encoded). s3: SigV4 query auth, X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders (host only), X-Amz-Signature, plus X-Amz-Security-Token with a session token; payload UNSIGNED-PAYLOAD; no x-id, no X-Amz-Content-Sha256. oss: V1, OSSAccessKeyId, Expires (= now + expiresSeconds, unix seconds), Signature. gcs: V4 GOOG4-RSA-SHA256, X-Goog-Algorithm, -Credential, -Date, -Expires, -SignedHeaders (host), -Signature. abs: service SAS with sp=r, sr=b, se = now + expiresSeconds, no st, no spr; sv pinned 2025-11-05 in TypeScript (the Java SDK may emit another sv and another order: compare abs by task id, not by signed URL).',
  "DEFAULT FILTER (location.filteredQueryParams absent; an explicit [] means no filtering): s3 = X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature, X-Amz-Security-Token (the token changes per session, so it is filtered too); oss = OSSAccessKeyId, Expires, Signature (like the peer daemon's own default filter); gcs = the six X-Goog-* names; abs = every SAS parameter name (see any abs case's filter).",
  'TASK ID: taskID({url, filter, tag, application, pieceLength}) as the peer daemon computes it (src/storage/taskid.ts). With the default filter, signedTaskID == taskIDs[0].taskID (tag, application, pieceLength null) for every kind; signedTaskIDEqualsUnsigned says whether a case expects that (false for the explicit-filter cases).',
  "OSS NOTE: the default oss filter drops OSSAccessKeyId too (not only the V1 signature's Expires, Signature), so an oss signed URL canonicalises to the bare object URL: its task id depends neither on the signing time nor on the access key (a key rotation on either side keeps preheat and download on one task id) and equals the task id of the object URL (signedTaskIDEqualsUnsigned true); signedCanonicalURL shows it.",
  "CREDENTIALS: credentialSets holds Secret data (plain, not base64) keyed like the Secret and the plugin config: s3 access_key, secret_key (+ session_token); oss access_key_id, access_key_secret; gcs service_account.json (the file content; the plugin's service_account_path points to such a file); abs account_key. All are public example values (AWS and OSS documentation keys, Google's inactive conformance-test service account, Azurite's well-known development key).",
  'CLOCK: each case has "now" (UTC) and "expiresSeconds". signedQuery lists the exact query pairs (decoded) in the TypeScript output order; for s3, oss and gcs the values are determined by the algorithm and must be equal in any implementation (order may differ).',
];

/** Public example credentials (see the CREDENTIALS rule). The gcs account is the plugin's test resource. */
function credentialSets(): Record<string, Record<string, string>> {
  return {
    s3: { access_key: 'AKIAIOSFODNN7EXAMPLE', secret_key: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' },
    's3-session': {
      access_key: 'ASIAIOSFODNN7EXAMPLE',
      secret_key: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      session_token: 'IQoJb3JpZ2luX2VjEXAMPLE/session+token==',
    },
    oss: {
      access_key_id: '44CF9590006BF252F707',
      access_key_secret: 'OtxrzxIsfpFjA7SwPzILwy8Bw21TLhquhboDYROV',
    },
    gcs: {
      'service_account.json': readFileSync(
        new URL('../plugin/src/test/resources/gcs-conformance-service-account.json', import.meta.url),
        'utf8',
      ),
    },
    abs: {
      account_key: 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==',
    },
  };
}

interface CaseInput {
  name: string;
  reference?: string;
  location: StorageLocation;
  key: string;
  credentials: string;
  now: string;
  expiresSeconds: number;
}

const NOW = '2026-01-15T08:00:00Z';

/** The cases, in file order; each location's field order is the order written to the file. */
const CASES: CaseInput[] = [
  {
    name: 's3 virtual-hosted, default region',
    location: { type: 's3', bucket: 'models' },
    key: 'resnet-18.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 virtual-hosted, region, key with slashes, spaces, unicode and parentheses',
    location: { type: 's3', bucket: 'ml-models', region: 'eu-central-1' },
    key: 'team a/models/résnet 18 (v2).mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 endpoint, path style (MinIO)',
    location: {
      type: 's3',
      bucket: 'models',
      region: 'us-east-1',
      endpoint: 'http://127.0.0.1:9000',
      pathStyle: true,
    },
    key: 'models/bert+base.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 endpoint with trailing slash, path style',
    location: {
      type: 's3',
      bucket: 'models',
      endpoint: 'https://minio.example.internal:9000/',
      pathStyle: true,
    },
    key: 'a/b.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 endpoint, virtual-hosted (no pathStyle)',
    location: {
      type: 's3',
      bucket: 'models',
      region: 'us-west-2',
      endpoint: 'https://s3.example.internal:8443',
    },
    key: 'dir/sub dir/model.tar.gz',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 with a session token',
    location: { type: 's3', bucket: 'models', region: 'ap-northeast-1' },
    key: 'models/x.mar',
    credentials: 's3-session',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 reserved characters in the key',
    location: { type: 's3', bucket: 'models' },
    key: "odd/!'()*&=+?#%;,:@$ ~_.-.bin",
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 empty path segment and leading slash kept',
    location: { type: 's3', bucket: 'models' },
    key: '/dir//file.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 explicit filter (only the signature)',
    location: { type: 's3', bucket: 'models', filteredQueryParams: ['X-Amz-Signature'] },
    key: 'resnet-18.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 explicit empty filter',
    location: { type: 's3', bucket: 'models', filteredQueryParams: [] },
    key: 'resnet-18.mar',
    credentials: 's3',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 's3 AWS documentation presigned-URL example (examplebucket/test.txt)',
    reference:
      'https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html (X-Amz-Signature aeeed9bb...)',
    location: {
      type: 's3',
      bucket: 'examplebucket',
      region: 'us-east-1',
      endpoint: 'https://s3.amazonaws.com',
    },
    key: 'test.txt',
    credentials: 's3',
    now: '2013-05-24T00:00:00Z',
    expiresSeconds: 86400,
  },
  {
    name: 'oss',
    location: { type: 'oss', bucket: 'models', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' },
    key: 'dir/模型 v1.mar',
    credentials: 'oss',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'oss http endpoint with port',
    location: { type: 'oss', bucket: 'models', endpoint: 'http://oss.example.internal:8080/' },
    key: 'resnet-18.mar',
    credentials: 'oss',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'oss documentation V1 URL-signature example',
    reference:
      'OSS "Include a V1 signature in a URL" example: Expires=1141889120&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D',
    location: { type: 'oss', bucket: 'quotes', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' },
    key: 'nelson',
    credentials: 'oss',
    now: '2006-03-09T07:24:20Z',
    expiresSeconds: 60,
  },
  {
    name: 'gcs Google V4 conformance "Simple GET"',
    reference: 'googleapis/conformance-tests storage/v1/v4_signatures.json',
    location: { type: 'gcs', bucket: 'test-bucket', projectID: 'dummy-project-id' },
    key: 'test-object',
    credentials: 'gcs',
    now: '2019-02-01T09:00:00Z',
    expiresSeconds: 10,
  },
  {
    name: 'gcs key with slashes, spaces, unicode',
    location: { type: 'gcs', bucket: 'ml-models' },
    key: 'team a/résnet (v2).mar',
    credentials: 'gcs',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'gcs endpoint override (emulator)',
    location: { type: 'gcs', bucket: 'ml-models', endpoint: 'http://127.0.0.1:4443' },
    key: 'models/resnet-18.mar',
    credentials: 'gcs',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'abs default endpoint',
    location: { type: 'abs', accountName: 'peerloadacct', container: 'models' },
    key: 'team a/résnet 18.mar',
    credentials: 'abs',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'abs Azurite endpoint (account in the path)',
    location: {
      type: 'abs',
      accountName: 'devstoreaccount1',
      container: 'models',
      endpoint: 'http://127.0.0.1:10000',
    },
    key: 'models/resnet-18.mar',
    credentials: 'abs',
    now: NOW,
    expiresSeconds: 3600,
  },
  {
    name: 'abs account endpoint (account in the host)',
    location: {
      type: 'abs',
      accountName: 'peerloadacct',
      container: 'models',
      endpoint: 'https://peerloadacct.blob.core.windows.net/',
    },
    key: 'resnet-18.mar',
    credentials: 'abs',
    now: NOW,
    expiresSeconds: 3600,
  },
];

/** The task-id variants of every case: none, tag, application, and all three parts. */
const VARIANTS: { tag: string | null; application: string | null; pieceLength: number | null }[] = [
  { tag: null, application: null, pieceLength: null },
  { tag: 'v1', application: null, pieceLength: null },
  { tag: null, application: 'torchserve', pieceLength: null },
  { tag: 'v1', application: 'torchserve', pieceLength: 4194304 },
];

/**
 * Runs `fn` with `Date` pinned to `iso` (`new Date()` and `Date.now()`; explicit dates unchanged).
 * @google-cloud/storage refuses an expiry already past by the wall clock and has no clock option, so signing at the
 * fixed clocks of the vectors needs this. Hand-written (a dozen lines) rather than a fake-timers dependency: only
 * Date is needed, and the script must also run outside the test runner.
 */
async function atClock<T>(iso: string, fn: () => Promise<T>): Promise<T> {
  const RealDate = globalThis.Date;
  const fixed = new RealDate(iso).getTime();
  class FixedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(fixed);
      else super(...(args as [string | number | Date]));
    }
    static override now(): number {
      return fixed;
    }
  }
  globalThis.Date = FixedDate as DateConstructor;
  try {
    return await fn();
  } finally {
    globalThis.Date = RealDate;
  }
}

async function vectorCase(c: CaseInput, sets: Record<string, Record<string, string>>) {
  const unsigned = objectURL(c.location, c.key);
  const filter = effectiveFilter(c.location);
  const taskIDs = VARIANTS.map((v) => ({
    ...v,
    taskID: taskID({
      url: unsigned,
      filter,
      tag: v.tag ?? undefined,
      application: v.application ?? undefined,
      pieceLength: v.pieceLength ?? undefined,
    }),
  }));
  const credentials = credentialsFromSecretData(c.location.type as ObjectStorageType, sets[c.credentials], {
    encoding: 'utf8',
  });
  const signed = await atClock(c.now, () =>
    signObjectURL(c.location, c.key, credentials, { now: new Date(c.now), expiresSeconds: c.expiresSeconds }),
  );
  const signedTaskID = taskID({ url: signed.url, filter });
  return {
    name: c.name,
    ...(c.reference !== undefined ? { reference: c.reference } : {}),
    location: c.location,
    key: c.key,
    credentials: c.credentials,
    now: c.now,
    expiresSeconds: c.expiresSeconds,
    objectURL: unsigned,
    filter,
    canonicalURL: canonicalURL(unsigned, filter),
    taskIDs,
    signedURL: signed.url,
    signedQuery: [...new URL(signed.url).searchParams],
    signedCanonicalURL: canonicalURL(signed.url, filter),
    signedTaskID,
    signedTaskIDEqualsUnsigned: signedTaskID === taskIDs[0]!.taskID,
  };
}

/** The file's text, exactly as committed. */
export async function generateStorageVectors(): Promise<string> {
  const sets = credentialSets();
  const cases = [];
  for (const c of CASES) cases.push(await vectorCase(c, sets));
  const doc = { description: DESCRIPTION, rules: RULES, credentialSets: sets, cases };
  const options = (await resolveConfig(VECTORS_PATH)) ?? {};
  return format(JSON.stringify(doc, null, 2), { ...options, filepath: VECTORS_PATH });
}

if (import.meta.main) {
  const text = await generateStorageVectors();
  if (process.argv.includes('--check')) {
    const current = readFileSync(VECTORS_PATH, 'utf8');
    if (current !== text) {
      console.error(`${VECTORS_PATH} is out of date: run node scripts/gen-storage-vectors.ts`);
      process.exitCode = 1;
    }
  } else {
    writeFileSync(VECTORS_PATH, text);
    console.error(`wrote ${VECTORS_PATH} (${CASES.length} cases)`);
  }
}
