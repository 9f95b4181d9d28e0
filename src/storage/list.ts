/**
 * Listing a model directory (an object-storage prefix) with each provider's own list API, through its SDK:
 * s3 `ListObjectsV2` (@aws-sdk/client-s3), gcs `objects.list` (@google-cloud/storage), abs `List Blobs`
 * (@azure/storage-blob). oss goes through its S3-compatible API (OSS answers ListObjectsV2 signed with SigV4 and
 * an OSS AccessKey, virtual-hosted style): no OSS SDK is a dependency, and this path is not exercised against OSS
 * itself by the tests (MinIO and Azurite are).
 *
 * The SDKs are loaded on first use, as sign.ts does: together they cost ~100 MiB a process rarely needs.
 * Errors are {@link ListError}: the SDK's message redacted (no URL query values, no credential), the prefix named.
 */
import type { ListedObject } from './fileset.ts';
import { DEFAULT_S3_REGION, objectURL, parseEndpoint, type StorageLocation } from './objecturl.ts';
import { CredentialsError, type StorageCredentials } from './credentials.ts';
import { redact } from '../redact.ts';

/** How many objects a listing reads at most before it gives up: the caps apply after include/exclude. */
export const DEFAULT_MAX_LISTED = 100_000;
const PAGE_SIZE = 1000;

export interface ListOptions {
  /** Stop (and fail) when the prefix holds more objects than this; default {@link DEFAULT_MAX_LISTED}. */
  maxListed?: number | undefined;
  signal?: AbortSignal | undefined;
}

/** A listing that failed; the message names the location and prefix and never holds a secret. */
export class ListError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ListError';
  }
}

function describeLocation(location: StorageLocation, prefix: string): string {
  const where =
    location.type === 'abs' ? `${location.accountName}/${location.container}` : String(location.bucket);
  return `${location.type} ${where} prefix "${prefix}"`;
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
  const maxListed = opts.maxListed ?? DEFAULT_MAX_LISTED;
  const out: ListedObject[] = [];
  const add = (key: string, size: number | undefined) => {
    out.push({ key, size });
    if (out.length > maxListed)
      throw new ListError(
        `${describeLocation(location, prefix)} holds more than ${maxListed} objects: choose a narrower prefix`,
      );
  };
  const secrets = secretValues(credentials);
  try {
    switch (credentials.type) {
      case 's3':
      case 'oss':
        await listS3(location, credentials, prefix, add, opts.signal);
        break;
      case 'gcs':
        await listGCS(location, credentials, prefix, add, opts.signal);
        break;
      case 'abs':
        await listABS(location, credentials, prefix, add, opts.signal);
        break;
    }
  } catch (e) {
    if (e instanceof ListError || opts.signal?.aborted) throw e;
    const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    throw new ListError(`cannot list ${describeLocation(location, prefix)}: ${redact(message, secrets)}`, {
      cause: e,
    });
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
  signal: AbortSignal | undefined,
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
  });
  try {
    let token: string | undefined;
    do {
      const page = await client.send(
        new ListObjectsV2Command({
          Bucket: location.bucket,
          Prefix: prefix,
          MaxKeys: PAGE_SIZE,
          ContinuationToken: token,
        }),
        signal ? { abortSignal: signal } : {},
      );
      for (const o of page.Contents ?? []) if (o.Key !== undefined) add(o.Key, o.Size);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  } finally {
    client.destroy();
  }
}

async function listGCS(
  location: StorageLocation,
  credentials: Extract<StorageCredentials, { type: 'gcs' }>,
  prefix: string,
  add: Add,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { Storage } = await import('@google-cloud/storage');
  const projectId = location.projectID ?? credentials.projectID;
  const storage = new Storage({
    ...(projectId ? { projectId } : {}),
    ...(location.endpoint !== undefined ? { apiEndpoint: parseEndpoint(location.endpoint).base } : {}),
    credentials: { client_email: credentials.clientEmail, private_key: credentials.privateKey },
  });
  const bucket = storage.bucket(location.bucket!);
  let pageToken: string | undefined;
  do {
    signal?.throwIfAborted();
    const [files, next] = await bucket.getFiles({
      prefix,
      autoPaginate: false,
      maxResults: PAGE_SIZE,
      ...(pageToken !== undefined ? { pageToken } : {}),
    });
    for (const f of files) {
      const size = f.metadata.size;
      add(f.name, size === undefined ? undefined : Number(size));
    }
    pageToken = (next as { pageToken?: string } | null | undefined)?.pageToken;
  } while (pageToken);
}

async function listABS(
  location: StorageLocation,
  credentials: Extract<StorageCredentials, { type: 'abs' }>,
  prefix: string,
  add: Add,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { ContainerClient, StorageSharedKeyCredential } = await import('@azure/storage-blob');
  // The container's URL is an object URL without its key: one place decides the account/endpoint layout.
  const containerURL = objectURL(location, 'k').slice(0, -'/k'.length);
  const client = new ContainerClient(
    containerURL,
    new StorageSharedKeyCredential(location.accountName!, credentials.accountKey),
  );
  const pages = client
    .listBlobsFlat({ prefix, ...(signal ? { abortSignal: signal } : {}) })
    .byPage({ maxPageSize: PAGE_SIZE });
  for await (const page of pages) {
    for (const b of page.segment.blobItems) add(b.name, b.properties.contentLength);
  }
}
