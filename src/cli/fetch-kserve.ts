/**
 * `peerload fetch [--kserve] STORAGE_URI DEST`: KServe's storage-initializer contract (what a
 * `ClusterStorageContainer` runs: two arguments, the InferenceService's `storageUri` and `/mnt/models`, and the
 * credentials KServe's webhook puts in the environment). Every file goes through the node's peer proxy; object-store
 * keys are signed here just before their download, with the task identity the operator's preheats use (the kind's
 * default filter, the credentials' tag), so the pods of every node join one task per file and a ModelPreheat of the
 * same prefix warms them. A single-file URI lands as that file under DEST; a prefix as its tree; a single tar
 * archive is extracted, as KServe does. docs/kserve.md lists what differs from KServe's own initializer.
 */
import { createHmac } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pino, type Logger } from 'pino';
import {
  DownloadRefused,
  downloadVersion,
  newProgress,
  preflight,
  type DownloaderConfig,
} from '../place/placer.ts';
import { ModelVersionSpecSchema, specProblems, type ModelVersionSpec } from '../place/spec.ts';
import { DEFAULT_MAX_FILES, MAX_DIRECTORY_FILES } from '../api/fileset.ts';
import { effectiveEnv, credentialsOf, httpHeaders, locationOf } from '../kserve/env.ts';
import { STAGING_PREFIX, archiveKind, removeStaleStaging } from '../place/mount.ts';
import { PlaceReason } from '../place/errors.ts';
import { fileName, parseStorageUri, StorageUriError, type StorageUri } from '../kserve/uri.ts';
import { storageReach } from '../policy/storage-reach.ts';
import { redact } from '../redact.ts';
import { createLogger } from '../runtime/logger.ts';
import { CredentialsError, type StorageCredentials } from '../storage/credentials.ts';
import { CREDENTIAL_TAG_PREFIX } from '../storage/credential-tag.ts';
import { FileSetError, selectFiles, type FileSetFile } from '../storage/fileset.ts';
import { listPrefix, ListError } from '../storage/list.ts';
import type { StorageLocation } from '../storage/objecturl.ts';
import { DOWNLOAD_OPTIONS, downloaderConfig } from './agent.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { redactedLines, type FetchLines } from './fetch-place.ts';

export const KSERVE_USAGE = `Usage: peerload fetch [--kserve] STORAGE_URI DEST [options]

KServe's storage initializer through the P2P network (a ClusterStorageContainer; docs/kserve.md). Downloads
STORAGE_URI into DEST through the node's peer proxy: s3://bucket/path, gs://bucket/path,
https://<account>.blob.core.windows.net/<container>/<path>, http(s)://host/path/file, hf://owner/model[:revision],
oci://registry/repository:tag (hf:// and oci:// need --kserve, else they keep their own layout). A single object
lands as DEST/<its name>, a prefix as its tree; a single .tar/.tar.gz/.tgz is extracted. Credentials come from the
variables KServe sets: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_ENDPOINT_URL (or
S3_ENDPOINT and S3_USE_HTTPS), AWS_DEFAULT_REGION, S3_USER_VIRTUAL_BUCKET; GOOGLE_APPLICATION_CREDENTIALS;
AZURE_STORAGE_ACCESS_KEY; HF_TOKEN; <host>-headers for http(s); STORAGE_CONFIG for KServe's storage spec;
STORAGE_ALLOW_PATTERNS and STORAGE_IGNORE_PATTERNS select files.
--proxy            the node's peer proxy (default http://$NODE_IP:4001 when NODE_IP is set, else
                   http://127.0.0.1:4001)
--allowed-storage-hosts
                   hosts object-store credentials may go to (default: the storage services' own hosts); an
                   S3-compatible store's host must be added here by the admin (in the ClusterStorageContainer)
--allowed-hub-hosts
                   hosts HF_TOKEN may go to (default huggingface.co, over https): a mirror HF_ENDPOINT names must be
                   added here by the admin, as http://host if it has no TLS
--allowed-hub-redirect-hosts
                   hosts an LFS file's redirect may name besides the Hub's own (default the public Hub's CDNs, over
                   https): a mirror's CDN must be added here by the admin, as http://host if it has no TLS
--max-files        most files of a prefix (default ${DEFAULT_MAX_FILES}, at most ${MAX_DIRECTORY_FILES})
--max-bytes, --min-free-bytes, --deadline, --concurrency, --daemon-version, --log-level  as for a model directory
Exit status: 0 in place, 1 download or listing failed, 2 bad input, missing credentials or refused.`;

const {
  root: _root,
  'credentials-dir': _c,
  'hard-link-root': _h,
  'server-uid': _u,
  ...SHARED
} = DOWNLOAD_OPTIONS;
const KSERVE_OPTIONS = {
  ...SHARED,
  proxy: { type: 'string' },
  kserve: { type: 'boolean' },
  'max-files': { type: 'string' },
  'allowed-hub-hosts': { type: 'string' },
  'allowed-hub-redirect-hosts': { type: 'string' },
} as const;

/** Whether `argv` asks for the KServe contract: `--kserve`, or an s3/gs/http(s) URI as an argument. */
export function isKServeInvocation(argv: readonly string[]): boolean {
  return argv.some(
    (a, i) =>
      a === '--kserve' ||
      /^(s3|gs):\/\//.test(a) ||
      // A flag's value (`--proxy http://...`) is not the URI.
      (/^https?:\/\//.test(a) && !(argv[i - 1]?.startsWith('--') && !argv[i - 1]!.includes('='))),
  );
}

/** KServe's allow/ignore patterns: a JSON array, else a comma-separated list. */
export function patterns(value: string | undefined): string[] | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  try {
    const parsed: unknown = JSON.parse(value);
    const list = Array.isArray(parsed) ? parsed : [parsed];
    const out = list.map((p) => String(p).trim()).filter((p) => p !== '');
    return out.length > 0 ? out : undefined;
  } catch {
    const out = value
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    return out.length > 0 ? out : undefined;
  }
}

/**
 * The tag of an http(s) file fetched with request headers (a token): an HMAC keyed by the headers, so only
 * holders of the same headers share its task, as the credentials' tag does for object stores.
 */
function headersTag(url: string, headers: Record<string, string>): string | undefined {
  const names = Object.keys(headers).sort();
  if (names.length === 0) return undefined;
  const key = names.map((n) => `${n.toLowerCase()}:${headers[n]}`).join('\n');
  const mac = createHmac('sha256', key)
    .update(`peerload http tag v1\n${new URL(url).host}`)
    .digest('hex');
  return CREDENTIAL_TAG_PREFIX + mac.slice(0, 32);
}

interface Plan {
  spec: ModelVersionSpec;
  credentials?: StorageCredentials;
  single: boolean;
}

type Values = Record<string, string | boolean | undefined>;
type Env = Readonly<Record<string, string | undefined>>;

function parseSpec(raw: unknown, uri: string): ModelVersionSpec {
  const parsed = ModelVersionSpecSchema.safeParse(raw);
  if (!parsed.success) throw new CliError(`${uri}: ${redact(specProblems(parsed.error))}`);
  return parsed.data;
}

/** The files of an object-store URI: the object itself when the key names one, else the tree under `key/`. */
async function objectPlan(
  uri: Extract<StorageUri, { kind: 'object' }>,
  text: string,
  env: Env,
  values: Values,
  config: DownloaderConfig,
): Promise<Plan> {
  const maxBytes = config.limits.maxBytes;
  const location: StorageLocation = locationOf(uri, env);
  const reach = storageReach(
    location,
    'storageUri',
    { storageHosts: config.storageHosts! },
    "the init container's",
  );
  // Checked before the credentials are read: a refused host never sees a key or a signature.
  if (!reach.allowed) throw new CliError(reach.message.replace(/^storageUri\.endpoint: /, `${text}: `));
  const credentials = await credentialsOf(uri, env);
  const key = uri.key;
  const listed = (await listPrefix(location, credentials, key)).filter((o) => (o.size ?? 1) > 0);
  const exact = key !== '' && !key.endsWith('/') ? listed.find((o) => o.key === key) : undefined;
  let files: FileSetFile[];
  if (exact) files = [{ key, path: fileName(key), size: exact.size }];
  else {
    const maxFiles = values['max-files'] === undefined ? undefined : Number(values['max-files']);
    try {
      files = selectFiles(
        {
          prefix: key === '' || key.endsWith('/') ? key : `${key}/`,
          include: patterns(env['STORAGE_ALLOW_PATTERNS']),
          exclude: patterns(env['STORAGE_IGNORE_PATTERNS']),
          maxFiles,
          maxBytes,
        },
        listed,
      );
    } catch (e) {
      if (!(e instanceof FileSetError)) throw e;
      throw new CliError(
        `${text}: ${e.message
          .replace(/include\/exclude/g, 'STORAGE_ALLOW_PATTERNS/STORAGE_IGNORE_PATTERNS')
          .replace(/raise maxFiles/, 'raise --max-files')
          .replace(/raise maxBytes/, 'raise --max-bytes')}`,
      );
    }
  }
  const { filteredQueryParams: _f, ...storage } = location;
  const spec = parseSpec(
    {
      version: 'files',
      storage: Object.fromEntries(Object.entries(storage).filter(([, v]) => v !== undefined)),
      files: files.map((f) => ({ path: f.path, key: f.key, size: f.size })),
    },
    text,
  );
  return { spec, credentials, single: exact !== undefined };
}

function httpPlan(uri: Extract<StorageUri, { kind: 'http' }>, text: string, env: Env): Plan {
  const headers = httpHeaders(uri.url, env);
  const spec = parseSpec(
    {
      version: 'files',
      files: [{ path: fileName(new URL(uri.url).pathname), url: uri.url }],
      headers: Object.keys(headers).length > 0 ? headers : undefined,
      tag: headersTag(uri.url, headers),
    },
    text,
  );
  return { spec, single: true };
}

/** The reasons of a version refused by what its single archive holds: bad input (exit 2), not a failed download. */
const ARCHIVE_REASONS: ReadonlySet<string> = new Set([
  PlaceReason.UnsafeTarEntry,
  PlaceReason.InvalidArchive,
  PlaceReason.LimitExceeded,
  PlaceReason.InsufficientStorage,
]);

/**
 * Places the plan into DEST with the placer's `mount` destination: staged whole on DEST's volume, then moved up;
 * a single tar archive extracted as KServe does. Returns the exit status.
 */
async function place(
  plan: Plan,
  text: string,
  dest: string,
  config: DownloaderConfig,
  logger: Logger,
  io: FetchLines,
  started: number,
): Promise<number> {
  const cfg: DownloaderConfig = {
    ...config,
    destination: { kind: 'mount', path: dest, extractSingleArchive: plan.single },
    limits: { ...config.limits, maxFiles: MAX_DIRECTORY_FILES },
    credentials: plan.credentials ? () => Promise.resolve(plan.credentials!) : undefined,
    logger,
  };
  try {
    await preflight('model', plan.spec, cfg);
  } catch (e) {
    if (e instanceof DownloadRefused) throw new CliError(`${e.reason}: ${redact(e.message)}`);
    throw e;
  }
  const p = await downloadVersion('model', plan.spec, cfg, newProgress('model', plan.spec, cfg.rule));
  if (p.state !== 'Ready') {
    io.err(`peerload fetch: ${text}: ${p.reason}: ${p.error}`);
    return p.reason !== undefined && ARCHIVE_REASONS.has(p.reason) ? 2 : 1;
  }
  const extracted = p.files[0]?.extracted !== undefined;
  // An archive's count is of its regular files, as they are in DEST now (directories are not counted).
  const files = extracted
    ? (await readdir(dest, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).length
    : p.filesDone;
  const expected = p.files.filter((f) => f.taskID !== undefined && f.taskID === f.expectedTaskID).length;
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  io.out(
    `fetched ${text}: ${files} files, ${p.bytesDone} bytes into ${dest} in ${seconds} s (${p.localHits} local hits, ${expected} of ${p.filesTotal} on their expected tasks)`,
  );
  return 0;
}

/** Rewrites a KServe `hf://owner/model[:revision]` into this command's `hf://owner/model[@revision]`. */
function hubReference(uri: string): string {
  const m = /^hf:\/\/([^/]+)\/([^/:@]+)(?::([^/]+))?$/.exec(uri);
  if (!m)
    throw new CliError(
      `"${uri}": a Hugging Face URI is hf://owner/model or hf://owner/model:revision, as KServe writes it`,
    );
  return `hf://${m[1]}/${m[2]}${m[3] ? `@${m[3]}` : ''}`;
}

/** The shared flags as they were given, for the hf:// and oci:// commands this one hands over to. */
function passOn(values: Values, proxy: string, extra: readonly string[] = []): string[] {
  const out = ['--proxy', proxy];
  for (const flag of [
    'max-bytes',
    'min-free-bytes',
    'deadline',
    'concurrency',
    'daemon-version',
    'log-level',
    ...extra,
  ])
    if (typeof values[flag] === 'string') out.push(`--${flag}`, values[flag]);
  return out;
}

/** hf:// and oci://: their own commands, placing into DEST as the mount point it is (the placer's `mount`). */
async function handOver(
  uri: StorageUri & { kind: 'hf' | 'oci' },
  dest: string,
  values: Values,
  proxy: string,
  io: FetchLines,
  env: NodeJS.ProcessEnv,
) {
  if (uri.kind === 'hf') {
    const { runHub } = await import('./fetch-hub.ts');
    const extra = ['allowed-hub-hosts', 'allowed-hub-redirect-hosts'];
    return runHub([hubReference(uri.reference), dest, ...passOn(values, proxy, extra)], io, env, true);
  }
  const { runOci } = await import('./fetch-oci.ts');
  return runOci(uri.reference, dest, { ...values, proxy }, io, true);
}

export async function runKServe(
  argv: string[],
  given: FetchLines,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const io = redactedLines(given);
  // The reported time covers the listing too: what the init container adds to the pod's start.
  const started = Date.now();
  const { values, positionals } = parseCommandArgs(argv, KSERVE_OPTIONS, true, KSERVE_USAGE);
  if (values.help) {
    io.out(KSERVE_USAGE);
    return 0;
  }
  if (positionals.length !== 2)
    throw new CliError(
      `give the storage URI and the destination, as KServe does: peerload fetch STORAGE_URI /mnt/models (got ${positionals.length} arguments)`,
    );
  const [text, destArg] = positionals as [string, string];
  if (values['max-files'] !== undefined) {
    const n = Number(values['max-files']);
    if (!(Number.isInteger(n) && n >= 1 && n <= MAX_DIRECTORY_FILES))
      throw new CliError(
        `--max-files: must be an integer from 1 to ${MAX_DIRECTORY_FILES}, got "${values['max-files']}"`,
      );
  }
  const proxy = values.proxy ?? (env['NODE_IP'] ? `http://${env['NODE_IP']}:4001` : 'http://127.0.0.1:4001');
  const dest = resolve(destArg);
  let uri: StorageUri;
  try {
    uri = parseStorageUri(text);
  } catch (e) {
    if (e instanceof StorageUriError) throw new CliError(`${redact(text)}: ${e.message}`);
    throw e;
  }
  if (dest.split('/').some((s) => s.startsWith(STAGING_PREFIX)))
    throw new CliError(`${destArg}: not a destination (a staging directory of this command)`);
  const config = downloaderConfig({ ...values, proxy, root: dest });
  await removeStaleStaging(dest);
  if (uri.kind === 'hf' || uri.kind === 'oci') {
    await config.dispatcher.close();
    return handOver(uri, dest, values, proxy, io, env);
  }
  const logger = createLogger(config.logLevel as 'info', pino.destination({ fd: 2, sync: true }));
  try {
    let plan: Plan;
    try {
      plan =
        uri.kind === 'http'
          ? httpPlan(uri, text, effectiveEnv(env))
          : await objectPlan(uri, text, effectiveEnv(env), values, config);
    } catch (e) {
      if (e instanceof CredentialsError) throw new CliError(`${text}: ${redact(e.message)}`);
      if (e instanceof ListError) {
        io.err(`peerload fetch: ${text}: the listing failed: ${redact(e.message)}`);
        return 1;
      }
      throw e;
    }
    if (plan.single && archiveKind(plan.spec.files[0]!.path) === 'unsupported')
      throw new CliError(
        `${text}: only .tar, .tar.gz and .tgz archives are extracted here; KServe's own initializer also extracts .zip (and other tar compressions): repack the model as .tar.gz, or leave this URI to KServe's initializer`,
      );
    return await place(plan, text, dest, config, logger, io, started);
  } finally {
    await config.dispatcher.close();
    logger.flush();
  }
}
