/**
 * A KServe `storageUri` as KServe's storage initializer (the `kserve-storage` package) tells its kinds apart: the
 * same prefixes and Azure host patterns, checked in the same order, so a URI means here what it means there.
 * Pure: no I/O.
 */

export type StorageUri =
  | { kind: 'object'; type: 's3' | 'gcs'; bucket: string; key: string }
  | { kind: 'object'; type: 'abs'; accountName: string; container: string; key: string; endpoint: string }
  | { kind: 'http'; url: string }
  | { kind: 'hf'; reference: string }
  | { kind: 'oci'; reference: string };

/** A URI this command does not take: `reason` says why and what to do instead. */
export class StorageUriError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StorageUriError';
  }
}

/** Kinds KServe's own initializer handles and this command leaves to it (see docs/kserve.md). */
const KSERVE_ONLY: readonly [RegExp, string][] = [
  [/^file:\/\//, 'a local path (file://)'],
  [/^\/mnt\/pvc/, 'a PVC path (KServe mounts pvc:// without an init container)'],
  [/^\/mnt\/models/, 'the multi-model mount'],
  [/^pvc:\/\//, 'a PVC (KServe mounts it without an init container)'],
  [/^(web)?hdfs:\/\//, 'HDFS'],
  [/^modelscope:\/\//, 'ModelScope'],
  [/^https:\/\/(.+?)\.file\.core\.windows\.net\//, 'an Azure file share'],
  [/^https:\/\/(.+?)\.z[0-9]{1,2}\.file\.storage\.azure\.net\//, 'an Azure file share'],
  [/^https:\/\/.+\.git$/, 'a git repository'],
];

const AZURE_BLOB = [
  /^https:\/\/([^/]+?)\.blob\.core\.windows\.net\/(.+)$/,
  /^https:\/\/([^/]+?)\.z[0-9]{1,2}\.blob\.storage\.azure\.net\/(.+)$/,
];

/** The bucket and key of `scheme://bucket/key` (the key may be empty: the bucket root). */
function bucketAndKey(uri: string, scheme: string): { bucket: string; key: string } {
  const rest = uri.slice(scheme.length);
  const slash = rest.indexOf('/');
  const bucket = slash < 0 ? rest : rest.slice(0, slash);
  const key = slash < 0 ? '' : rest.slice(slash + 1);
  if (!/^[a-z0-9][a-z0-9._-]{2,254}$/.test(bucket))
    throw new StorageUriError(
      `"${scheme}${bucket}": the bucket must be a bucket name (lower-case letters, digits, . _ -), as in ${scheme}bucket/path/to/model`,
    );
  return { bucket, key };
}

/** Parses a storage URI; throws {@link StorageUriError} naming the problem and the fix. */
export function parseStorageUri(uri: string): StorageUri {
  if (uri.trim() !== uri || uri === '')
    throw new StorageUriError('the storage URI is empty or has spaces around it');
  for (const [re, what] of KSERVE_ONLY)
    if (re.test(uri))
      throw new StorageUriError(
        `${what} is not fetched through the P2P network; leave it to KServe's own storage initializer (keep it out of the ClusterStorageContainer's supportedUriFormats)`,
      );
  if (uri.startsWith('s3://')) return { kind: 'object', type: 's3', ...bucketAndKey(uri, 's3://') };
  if (uri.startsWith('gs://')) return { kind: 'object', type: 'gcs', ...bucketAndKey(uri, 'gs://') };
  if (uri.startsWith('hf://')) return { kind: 'hf', reference: uri };
  if (uri.startsWith('oci://')) return { kind: 'oci', reference: uri };
  for (const re of AZURE_BLOB) {
    const m = re.exec(uri);
    if (!m) continue;
    const parsed = new URL(uri);
    if (parsed.search !== '')
      throw new StorageUriError(
        'an Azure URI with a SAS token in its query is not supported: give the storage account key (AZURE_STORAGE_ACCESS_KEY) instead, so each URL is signed for its own object',
      );
    const [container, ...rest] = parsed.pathname.replace(/^\/+/, '').split('/');
    if (!container || rest.join('/').replace(/^\/+|\/+$/g, '') === '')
      throw new StorageUriError(
        'an Azure blob URI names a container and a path: https://<account>.blob.core.windows.net/<container>/<path>',
      );
    return {
      kind: 'object',
      type: 'abs',
      accountName: m[1]!,
      container,
      key: rest.join('/').replace(/^\/+|\/+$/g, ''),
      endpoint: `https://${parsed.host}`,
    };
  }
  if (/^https?:\/\/[^/]+\/.+/.test(uri)) {
    let url: URL;
    try {
      url = new URL(uri);
    } catch {
      throw new StorageUriError('the http(s) URI is not a valid URL');
    }
    if (url.username || url.password)
      throw new StorageUriError(
        'an http(s) URI may not carry a user and password: give headers in the <host>-headers environment variable',
      );
    const name = url.pathname.split('/').pop() ?? '';
    if (name === '') throw new StorageUriError(`no file name in the URI path "${url.pathname}"`);
    return { kind: 'http', url: url.href };
  }
  throw new StorageUriError(
    'unknown storage URI: give s3://bucket/path, gs://bucket/path, https://<account>.blob.core.windows.net/<container>/<path>, http(s)://host/path/file, hf://owner/model[:revision] or oci://registry/repository:tag',
  );
}

/** The file name a URL's path ends with (a single-file URI lands as that file). */
export function fileName(path: string): string {
  return (
    path
      .split('/')
      .filter((s) => s !== '')
      .pop() ?? ''
  );
}
