/**
 * Listing a model directory (an object-storage prefix) with each provider's own list API: s3 `ListObjectsV2`
 * (@aws-sdk/client-s3), abs `List Blobs` (@azure/storage-blob), both through the bounded client of list-http.ts,
 * and gcs `objects.list` (the JSON API, requested there too: its SDK offers no way to bound an answer's size). oss
 * goes through its S3-compatible API (OSS answers ListObjectsV2 signed with SigV4 and an OSS AccessKey,
 * virtual-hosted style): no OSS SDK is a dependency, and this path is not exercised against OSS itself by the tests
 * (MinIO and Azurite are).
 *
 * Every listing is bounded (list-bounds.ts): a server that never answers, answers forever or answers too much ends
 * it with a {@link ListError} whose `failure` says which, never with the process out of memory.
 *
 * The SDKs are loaded on first use, as sign.ts does: together they cost ~100 MiB a process rarely needs.
 * Errors are {@link ListError}: the prefix named, the status and a documented error code, never the answer's text
 * (list-errors.ts).
 */
import type { ListedObject } from './fileset.ts';
import { DEFAULT_S3_REGION, objectURL, parseEndpoint, type StorageLocation } from './objecturl.ts';
import { CredentialsError, type StorageCredentials } from './credentials.ts';
import { redact, redactBounded } from '../redact.ts';
import {
  DEFAULT_LIST_BOUNDS,
  DEFAULT_MAX_LISTED,
  ListBoundHit,
  ListError,
  type ListBounds,
} from './list-bounds.ts';
import { azureHttpClient, exchange, ListRun, s3RequestHandler } from './list-http.ts';
import { describeListFailure, gcsErrorCode, StoreAnswerError } from './list-errors.ts';
import { USER_AGENT } from '../version.ts';

export { DEFAULT_MAX_LISTED, ListError };

const PAGE_SIZE = 1000;
/** Longest SDK or server message kept: it ends up in a status condition. */
const MAX_MESSAGE = 1024;

export interface ListOptions extends Partial<ListBounds> {
  signal?: AbortSignal | undefined;
}

function describeLocation(location: StorageLocation, prefix: string): string {
  const where =
    location.type === 'abs' ? `${location.accountName}/${location.container}` : String(location.bucket);
  return `${location.type} ${where} prefix "${prefix}"`;
}

/** What to do about a bound that was hit, for the message. */
function boundAdvice(hit: ListBoundHit, location: StorageLocation): string {
  if (hit.failure === 'timedOut')
    return location.endpoint !== undefined
      ? `check that objectStorage.endpoint ${location.endpoint} is the store and answers`
      : 'the store did not answer in time; it is listed again later';
  return location.endpoint !== undefined
    ? `choose a narrower objectStorage.prefix, or check that objectStorage.endpoint ${location.endpoint} is the store`
    : 'choose a narrower objectStorage.prefix';
}

/** Every object under `prefix` (keys and sizes), in the provider's order. */
export async function listPrefix(
  location: StorageLocation,
  credentials: StorageCredentials,
  prefix: string,
  opts: ListOptions = {},
): Promise<ListedObject[]> {
  if (credentials.type !== location.type)
    throw new CredentialsError(
      `credentials of type ${credentials.type} cannot list ${location.type} objects`,
    );
  const { signal, ...given } = opts;
  const bounds: ListBounds = { ...DEFAULT_LIST_BOUNDS };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) bounds[k as keyof ListBounds] = v;
  const run = new ListRun(bounds, signal);
  const out: ListedObject[] = [];
  const add = (key: string, size: number | undefined) => {
    run.key(key);
    out.push({ key, size });
  };
  const secrets = secretValues(credentials);
  try {
    switch (credentials.type) {
      case 's3':
      case 'oss':
        await listS3(location, credentials, prefix, add, run);
        break;
      case 'gcs':
        await listGCS(location, credentials, prefix, add, run);
        break;
      case 'abs':
        await listABS(location, credentials, prefix, add, run);
        break;
    }
  } catch (e) {
    if (e instanceof ListError) throw e;
    // The bound first: an SDK may have turned the abort into an error of its own.
    const hit = run.hitBound;
    if (hit)
      throw new ListError(
        `cannot list ${describeLocation(location, prefix)}: ${hit.message}: ${redact(boundAdvice(hit, location))}`,
        { cause: hit, failure: hit.failure },
      );
    if (signal?.aborted) throw (signal.reason as unknown) ?? e;
    // Our words only: the status, a documented code, what to check (list-errors.ts says why). No cause either: an
    // SDK's error quotes the answer, and a logged error's cause is written with it.
    throw new ListError(
      `cannot list ${describeLocation(location, prefix)}: ${redactBounded(describeListFailure(e), MAX_MESSAGE, secrets)}`,
    );
  } finally {
    run.close();
  }
  return out;
}

function secretValues(c: StorageCredentials): string[] {
  switch (c.type) {
    case 's3':
      return [c.secretAccessKey, c.sessionToken ?? ''];
    case 'oss':
      return [c.accessKeySecret];
    case 'gcs':
      return [c.privateKey];
    case 'abs':
      return [c.accountKey];
  }
}

type Add = (key: string, size: number | undefined) => void;

async function listS3(
  location: StorageLocation,
  credentials: Extract<StorageCredentials, { type: 's3' | 'oss' }>,
  prefix: string,
  add: Add,
  run: ListRun,
): Promise<void> {
  const { S3Client, ListObjectsV2Command } = await import('@aws-sdk/client-s3');
  let region = location.region || DEFAULT_S3_REGION;
  if (location.type === 'oss' && !location.region && location.endpoint) {
    // OSS's S3-compatible API signs with the region its endpoint names (oss-cn-hangzhou.aliyuncs.com).
    const first = parseEndpoint(location.endpoint).host.split('.')[0]!;
    if (first.startsWith('oss-')) region = first;
  }
  const client = new S3Client({
    region,
    ...(location.endpoint !== undefined ? { endpoint: parseEndpoint(location.endpoint).base } : {}),
    forcePathStyle: location.type === 's3' && location.pathStyle === true,
    credentials: {
      accessKeyId: credentials.accessKeyID,
      secretAccessKey: credentials.type === 's3' ? credentials.secretAccessKey : credentials.accessKeySecret,
      ...(credentials.type === 's3' && credentials.sessionToken !== undefined
        ? { sessionToken: credentials.sessionToken }
        : {}),
    },
    maxAttempts: 3,
    requestHandler: s3RequestHandler(run),
  });
  try {
    let token: string | undefined;
    do {
      run.page();
      const page = await client.send(
        new ListObjectsV2Command({
          Bucket: location.bucket,
          Prefix: prefix,
          MaxKeys: PAGE_SIZE,
          ContinuationToken: token,
        }),
        { abortSignal: run.signal },
      );
      for (const o of page.Contents ?? []) if (o.Key !== undefined) add(o.Key, o.Size);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  } finally {
    client.destroy();
  }
}

/** The fields of an `objects.list` answer the listing reads (`fields=` asks for no others). */
interface GCSPage {
  items?: { name?: unknown; size?: unknown }[];
  nextPageToken?: unknown;
}

/**
 * gcs `objects.list` requested directly: the SDK's client reads whole answers with no size bound and none of its
 * options changes that. The access token comes from the SDK's auth client, for Google's endpoint only: as the SDK
 * does by default, a custom endpoint (an emulator) gets no token.
 */
async function listGCS(
  location: StorageLocation,
  credentials: Extract<StorageCredentials, { type: 'gcs' }>,
  prefix: string,
  add: Add,
  run: ListRun,
): Promise<void> {
  const base =
    location.endpoint !== undefined
      ? parseEndpoint(location.endpoint).base
      : 'https://storage.googleapis.com';
  const headers: Record<string, string> = { accept: 'application/json', 'user-agent': USER_AGENT };
  if (location.endpoint === undefined) {
    const { Storage } = await import('@google-cloud/storage');
    const projectId = location.projectID ?? credentials.projectID;
    const storage = new Storage({
      ...(projectId ? { projectId } : {}),
      credentials: { client_email: credentials.clientEmail, private_key: credentials.privateKey },
    });
    headers['authorization'] = `Bearer ${await storage.authClient.getAccessToken()}`;
  }
  let pageToken: string | undefined;
  do {
    run.page();
    const q = new URLSearchParams({
      prefix,
      maxResults: String(PAGE_SIZE),
      fields: 'items(name,size),nextPageToken',
    });
    if (pageToken !== undefined) q.set('pageToken', pageToken);
    const res = await exchange(run, `${base}/storage/v1/b/${encodeURIComponent(location.bucket!)}/o?${q}`, {
      method: 'GET',
      headers,
    });
    const text = res.body.toString('utf8');
    if (res.status >= 300) throw new StoreAnswerError(res.status, gcsErrorCode(text));
    let page: GCSPage;
    try {
      page = JSON.parse(text) as GCSPage;
    } catch {
      throw new StoreAnswerError(res.status, undefined);
    }
    for (const f of page.items ?? []) {
      if (typeof f.name !== 'string') continue;
      add(f.name, f.size === undefined ? undefined : Number(f.size));
    }
    pageToken =
      typeof page.nextPageToken === 'string' && page.nextPageToken !== '' ? page.nextPageToken : undefined;
  } while (pageToken);
}

async function listABS(
  location: StorageLocation,
  credentials: Extract<StorageCredentials, { type: 'abs' }>,
  prefix: string,
  add: Add,
  run: ListRun,
): Promise<void> {
  const { ContainerClient, StorageSharedKeyCredential } = await import('@azure/storage-blob');
  // The container's URL is an object URL without its key: one place decides the account/endpoint layout.
  const containerURL = objectURL(location, 'k').slice(0, -'/k'.length);
  const client = new ContainerClient(
    containerURL,
    new StorageSharedKeyCredential(location.accountName!, credentials.accountKey),
    {
      // The SDK's retry policy waits up to minutes between tries by default; the run's bounds are the limit.
      retryOptions: { maxTries: 3, retryDelayInMs: 500, maxRetryDelayInMs: 2_000 },
      httpClient: azureHttpClient(run) as never,
    },
  );
  const pages = client.listBlobsFlat({ prefix, abortSignal: run.signal }).byPage({ maxPageSize: PAGE_SIZE });
  for (;;) {
    run.page();
    const next = await pages.next();
    if (next.done) break;
    for (const b of next.value.segment.blobItems) add(b.name, b.properties.contentLength);
  }
}
