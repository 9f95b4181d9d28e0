import { readFile } from 'node:fs/promises';
import { load } from 'js-yaml';
import { OBJECT_STORAGE_TYPES, type ObjectStorageType } from '../api/objectstorage.ts';
import { credentialTag, taskTag } from '../storage/credential-tag.ts';
import { CredentialsError, credentialsFromSecretData } from '../storage/credentials.ts';
import { FileSetError, fileSetEntries, selectFiles, type ListedObject } from '../storage/fileset.ts';
import { ListError, listPrefix } from '../storage/list.ts';
import { effectiveFilter, type StorageLocation } from '../storage/objecturl.ts';
import {
  DAEMON_VERSION_HINT,
  DEFAULT_FILTERED_QUERY_PARAMS,
  DEFAULT_TASK_ID_RULE,
  canonicalURL,
  taskID,
  taskIdRule,
} from '../storage/taskid.ts';
import { redactURL } from '../redact.ts';
import { OBJECT_STORAGE_FLAGS, parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';

const USAGE = `Usage: peerload taskid <url>... [--filter a,b] [--tag T] [--application A] [--piece-length N]
                      [--daemon-version V] [--canonical]
       peerload taskid --object-storage TYPE --bucket B [--endpoint E] [--path-style] --prefix P
                      (--file PATH... | --credentials FILE [--include G]... [--exclude G]...) [options above]

Prints the P2P network's task id of a download, as the peer daemon computes it, alone on one line; with several
URLs, or for a model directory, one line per file: "<task id>  <url or path>" (signed URLs are printed redacted).
--filter          query parameter names left out of the id (comma- or &-separated), e.g. X-Amz-Signature,X-Amz-Date;
                  '' for none. Default for a URL: the peer daemon's default for a request without filter headers (the
                  signature parameters of S3, GCS, OSS, OBS and COS, and "ns"); for a directory: the storage kind's
                  default filter, as the operator sends it
--tag             task tag (default: none)
--application     task application (default: none)
--piece-length    piece length in bytes (default: none, the peer daemon's own)
--daemon-version  the peer daemon (dragonfly-client) version: 1.4 (below 1.5.3: the query keeps its order),
                  1.5.3+ (sorted, as the manager computes it) or a version such as 1.4.2; default ${DEFAULT_TASK_ID_RULE}
                  (Dragonfly v2.5.1 bundles client 1.4.2)
--canonical       print the canonical URL the id is computed from instead of the id
A model directory (the files under a prefix of a bucket):
--object-storage  s3, oss, gcs or abs, with --bucket (s3, oss, gcs) or --container and --account-name (abs),
                  --region (s3), --endpoint (oss, S3-compatible stores, Azurite), --path-style (s3 with an endpoint)
--prefix          the directory's key prefix, e.g. models/llama/
--file            a file's path under the prefix; repeat for several (no listing)
--credentials     the storage credentials, a YAML/JSON map of the Secret's keys with plain values (as in stringData),
                  e.g. {access_key: ..., secret_key: ...}: the ids then carry the tag these credentials give every
                  object the operator, the plugin and the agent sign (their HMAC, never the secret), as a preheat's
                  status.tasks do; without --file the prefix is listed with them. Without --credentials the ids are
                  those of the same objects fetched without credentials (public objects)
--include/--exclude  glob patterns on the paths under the prefix (repeatable)`;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    argv,
    {
      filter: { type: 'string' },
      tag: { type: 'string' },
      application: { type: 'string' },
      'piece-length': { type: 'string' },
      'daemon-version': { type: 'string', default: DEFAULT_TASK_ID_RULE },
      canonical: { type: 'boolean' },
      ...OBJECT_STORAGE_FLAGS,
      'path-style': { type: 'boolean' },
      prefix: { type: 'string' },
      file: { type: 'string', multiple: true },
      credentials: { type: 'string' },
      include: { type: 'string', multiple: true },
      exclude: { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
    },
    true,
    USAGE,
  );
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  let pieceLength: number | undefined;
  if (values['piece-length'] !== undefined) {
    pieceLength = Number(values['piece-length']);
    if (!Number.isInteger(pieceLength) || pieceLength <= 0) {
      throw new CliError(
        `--piece-length must be a positive integer number of bytes, got "${values['piece-length']}"`,
      );
    }
  }
  const rule = taskIdRule(values['daemon-version']);
  if (rule === undefined) {
    throw new CliError(`--daemon-version ${DAEMON_VERSION_HINT}, got "${values['daemon-version']}"`);
  }
  const filter = values.filter
    ?.split(/[,&]/)
    .map((s) => s.trim())
    .filter(Boolean);
  const identity = { tag: values.tag, application: values.application, pieceLength, rule };

  if (values['object-storage'] !== undefined) {
    if (positionals.length > 0) throw new CliError('give either URLs or --object-storage, not both');
    const lines = await directory(values, filter, identity);
    for (const line of lines) console.log(line);
    return 0;
  }
  if (positionals.length === 0) throw new CliError(`expected a URL or --object-storage\n\n${USAGE}`);
  for (const url of positionals) {
    try {
      new URL(url);
    } catch {
      throw new CliError(
        `"${redactURL(url)}" is not an absolute URL (e.g. https://bucket.s3.amazonaws.com/model.mar)`,
      );
    }
  }
  // A request without filter headers gets the daemon's default filter (its proxy rule's filtered_query_params,
  // whose default is this list), so that is what the id of such a download is computed with.
  const effective = filter ?? DEFAULT_FILTERED_QUERY_PARAMS;
  for (const url of positionals) {
    const out = values.canonical
      ? canonicalURL(url, effective, rule)
      : taskID({ url, filter: effective, ...identity });
    console.log(positionals.length === 1 ? out : `${out}  ${redactURL(url)}`);
  }
  return 0;
}

interface DirectoryFlags {
  'object-storage'?: string | undefined;
  bucket?: string | undefined;
  container?: string | undefined;
  'account-name'?: string | undefined;
  region?: string | undefined;
  endpoint?: string | undefined;
  'path-style'?: boolean | undefined;
  prefix?: string | undefined;
  file?: string[] | undefined;
  credentials?: string | undefined;
  include?: string[] | undefined;
  exclude?: string[] | undefined;
  canonical?: boolean | undefined;
}

/** One line per file of a model directory: `<task id>  <path>` (or the canonical URL). */
async function directory(
  values: DirectoryFlags,
  filter: string[] | undefined,
  identity: Parameters<typeof fileSetEntries>[2],
): Promise<string[]> {
  const type = values['object-storage']!;
  if (!(OBJECT_STORAGE_TYPES as readonly string[]).includes(type))
    throw new CliError(`--object-storage: must be one of ${OBJECT_STORAGE_TYPES.join(', ')}, got "${type}"`);
  if (values.prefix === undefined)
    throw new CliError('--object-storage needs --prefix (the model directory)');
  const location: StorageLocation = {
    type: type as ObjectStorageType,
    bucket: values.bucket,
    container: values.container,
    accountName: values['account-name'],
    region: values.region,
    endpoint: values.endpoint,
    pathStyle: values['path-style'],
  };
  const files = values.file;
  if (files === undefined && values.credentials === undefined)
    throw new CliError('give --file (the paths under --prefix) or --credentials (to list --prefix), or both');
  try {
    let listed: ListedObject[] | undefined;
    let tag = identity?.tag;
    if (values.credentials !== undefined) {
      const credentials = credentialsFromSecretData(
        location.type,
        await readCredentials(values.credentials),
        {
          encoding: 'utf8',
          secretName: values.credentials,
        },
      );
      tag = taskTag(tag, credentialTag(location, credentials));
      if (files === undefined) listed = await listPrefix(location, credentials, values.prefix);
    }
    const selected = selectFiles(
      { prefix: values.prefix, files, include: values.include, exclude: values.exclude },
      listed,
    );
    const effective = filter ?? effectiveFilter(location);
    const entries = fileSetEntries(location, selected, { ...identity, tag, filter: effective });
    return entries.map((e) =>
      values.canonical
        ? `${canonicalURL(e.url, effective, identity?.rule)}  ${e.path}`
        : `${e.taskID}  ${e.path}`,
    );
  } catch (e) {
    if (e instanceof FileSetError || e instanceof CredentialsError || e instanceof ListError)
      throw new CliError(e.message);
    if (e instanceof Error && /is required for|endpoint must be/.test(e.message))
      throw new CliError(e.message);
    throw e;
  }
}

async function readCredentials(path: string): Promise<Record<string, string>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw new CliError(`--credentials: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  let data: unknown;
  try {
    data = load(text);
  } catch {
    // The parser's message quotes the file: never print it.
    throw new CliError(`--credentials: ${path} is not YAML or JSON`);
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data))
    throw new CliError(`--credentials: ${path} must be a map of the Secret's keys`);
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, String(v)]));
}
