/**
 * The placer: one version of a model directory onto this pod's disk, as a server must see it, all of it or nothing.
 * Every placement goes through here: the agent's (a PUT from the operator), `peerload fetch --spec`, `hf://`,
 * `oci://` (src/cli/fetch-oci-place.ts hands it the manifest's files) and KServe's storage initializer. Every file
 * goes through the node's peer proxy (proxy-fetch.ts) into a temporary directory next to the target, each size
 * checked, each published sha256 checked (checksum.ts; a digest served wrongly before is asked for under a fresh
 * task, refetch.ts), tar archives extracted safely once every file is in (extract.ts), and the directory is put in
 * place only when all of it is complete. Where it goes is the {@link Destination}: renamed to `<root>/<directory>/<version>`
 * (the agent's layout) or to one given directory (rename(2) of a directory within one file system is atomic), or,
 * for a mount point that cannot be replaced (KServe's emptyDir), staged on the same volume and then moved up. The
 * disk is bounded before anything is written (the known sizes against the byte cap and the free space) and while
 * writing (files of unknown size count as they come); the whole placement has a deadline. Messages name files by
 * their path in the model, never by URL; failures carry the reason words of errors.ts.
 */
import { DEFAULT_FILTERED_QUERY_PARAMS } from '../storage/taskid.ts';
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, rmdir, stat, statfs } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import { redact } from '../redact.ts';
import type { HostRule } from '../policy/reach.ts';
import { defaultStorageHosts, storageReach } from '../policy/storage-reach.ts';
import type { ObjectStorageType } from '../api/objectstorage.ts';
import type { StorageCredentials } from '../storage/credentials.ts';
import { effectiveFilter } from '../storage/objecturl.ts';
import { credentialTag, taskTag } from '../storage/credential-tag.ts';
import { signObjectURL } from '../storage/sign.ts';
import {
  APPLICATION_HEADER,
  DEFAULT_TASK_ID_RULE,
  PIECE_LENGTH_HEADER,
  TAG_HEADER,
  filterHeaders,
  taskID,
  type TaskIdRule,
} from '../storage/taskid.ts';
import { ChecksumMismatch, checkSha256, sha256File } from './checksum.ts';
import { DownloadRefused, PlaceError, PlaceReason } from './errors.ts';
import { extractLayer, newExtractState } from './extract.ts';
import { STAGING_PREFIX, archiveKind, extractArchive, moveEntries } from './mount.ts';
import { FetchError, fetchFile, fetchLogFields } from './proxy-fetch.ts';
import { writeRecord } from './record.ts';
import { markPoisoned, poisonedDigests, refetchCount, refetchTag } from './refetch.ts';
import { specLocation, type ModelVersionSpec } from './spec.ts';

export { DownloadRefused } from './errors.ts';

/** Prefix of the temporary directories: a dot, so a repository scan (Triton's, a human's `ls`) passes them by. */
export const TEMP_PREFIX = '.peerload-tmp-';

export interface AgentLimits {
  /** Bytes one version may take. */
  maxBytes: number;
  /** Free bytes the file system must keep after the download. */
  minFreeBytes: number;
  /** Whole download, ms. */
  deadlineMs: number;
  /** Files downloaded at once. */
  concurrency: number;
  /** Files the tar layers of one version may unpack (default {@link DEFAULT_MAX_FILES}). */
  maxFiles?: number | undefined;
}

/** Files a version's tar layers may unpack when the agent is not told otherwise. */
export const DEFAULT_MAX_FILES = 100_000;

export const DEFAULT_LIMITS: AgentLimits = {
  maxBytes: 1024 ** 4,
  minFreeBytes: 1024 ** 3,
  deadlineMs: 3_600_000,
  concurrency: 4,
};

/**
 * Where a placed version goes.
 * - `version` (the default): `<root>/<directory or name>/<version>`, renamed into place whole; a record of the
 *   placement is kept (record.ts). The agent's layout, and `peerload fetch --spec` / `hf://`.
 * - `directory`: exactly `path` (which must not exist yet), renamed into place whole: `peerload fetch oci://`.
 * - `mount`: `path` is a mount point that exists and cannot be replaced (KServe's emptyDir `/mnt/models`): the
 *   version is placed whole into a hidden staging directory on the same volume, then its entries are moved up one
 *   by one (replacing what an earlier run left under the same name). With `extractSingleArchive`, a version of one
 *   file named as a tar archive (`.tar`, `.tar.gz`, `.tgz`) is extracted there instead, as KServe's initializer does.
 */
export type Destination =
  | { kind: 'version' }
  | { kind: 'directory'; path: string }
  | { kind: 'mount'; path: string; extractSingleArchive?: boolean | undefined };

export interface DownloaderConfig {
  /** The model root as this process sees it (also where the refetch counts live, refetch.ts). */
  root: string;
  /** Where the version goes; default `<root>/<directory>/<version>`. */
  destination?: Destination | undefined;
  /** `http://host:port` of the node's peer proxy. */
  proxy: string;
  dispatcher: Dispatcher;
  /**
   * The model root as the peer daemon sees it (for a `directory` or `mount` destination: the directory that holds
   * the temporary one, i.e. the path's parent or the mount point): set, files are first asked for as hard links of
   * the daemon's cache.
   */
  hardLinkRoot?: string | undefined;
  /**
   * The uid the model server runs as (its container's runAsUser): a hard link is kept only when that uid can
   * neither write the daemon's file nor make it writable (read-only-link.ts); unknown or 0, files are copied.
   */
  serverUid?: number | undefined;
  limits: AgentLimits;
  /** The credentials that sign a spec's keys (the mounted Secret); absent: only URLs are accepted. */
  credentials?: ((type: ObjectStorageType) => Promise<StorageCredentials>) | undefined;
  /** Hosts a spec's storage location may name for keys the agent signs (--allowed-storage-hosts); default the
   *  storage services' own. The spec comes from whoever holds the agent's token, the credentials from the pod. */
  storageHosts?: readonly HostRule[] | undefined;
  /** The peer daemon's task id rule, for the expected ids. */
  rule?: TaskIdRule | undefined;
  logger?: Logger | undefined;
  /** The free bytes of the volume holding a path (default: statfs); tests give a reading of their own. */
  freeBytes?: ((path: string) => Promise<number>) | undefined;
}

export type FileState = 'Pending' | 'Downloading' | 'Done' | 'Failed';
export type VersionState = 'Downloading' | 'Ready' | 'Failed';

export interface FileProgress {
  path: string;
  size?: number | undefined;
  bytes: number;
  state: FileState;
  /** The id the preheat's identity gives this file. */
  expectedTaskID?: string | undefined;
  /** The id the daemon answered with. */
  taskID?: string | undefined;
  localHit?: boolean | undefined;
  hardLink?: boolean | undefined;
  hardLinkFallback?: string | undefined;
  /** A tar layer: the files it unpacked. */
  extracted?: number | undefined;
  error?: string | undefined;
  /** The HTTP status of a failed fetch, when there was one (the proxy's, or the origin's as it passed it on). */
  status?: number | undefined;
  /** Whose answer that status was: the daemon's `X-Dragonfly-Error-Type` (`backend`: the origin's). */
  errorType?: string | undefined;
}

export interface VersionProgress {
  name: string;
  version: string;
  directory: string;
  state: VersionState;
  filesTotal: number;
  filesDone: number;
  /** Sum of the known sizes (files without a size count once done). */
  bytesTotal: number;
  bytesDone: number;
  localHits: number;
  hardLinks: number;
  startedAt: string;
  finishedAt?: string | undefined;
  /** Why the version failed (a file's error, the deadline, the disk). */
  error?: string | undefined;
  /** A reason word for the failure: DiskBudgetExceeded, InsufficientStorage, DeadlineExceeded, DownloadFailed... */
  reason?: string | undefined;
  /** The path of the file whose failure failed the version, when one did. */
  failedFile?: string | undefined;
  files: FileProgress[];
}

/** `<root>/<directory or name>/<version>`. */
export function versionPath(
  root: string,
  name: string,
  spec: Pick<ModelVersionSpec, 'directory' | 'version'>,
) {
  return join(root, spec.directory ?? name, spec.version);
}

/** Where a placement lands, and the directory that holds its temporary directory (on the target's volume). */
function placement(
  name: string,
  spec: Pick<ModelVersionSpec, 'directory' | 'version'>,
  config: Pick<DownloaderConfig, 'root' | 'destination' | 'hardLinkRoot'>,
): { target: string; parent: string; daemonParent: string | undefined } {
  const d = config.destination ?? { kind: 'version' };
  if (d.kind === 'version') {
    const directory = spec.directory ?? name;
    const daemonParent = config.hardLinkRoot !== undefined ? join(config.hardLinkRoot, directory) : undefined;
    return {
      target: versionPath(config.root, name, spec),
      parent: join(config.root, directory),
      daemonParent,
    };
  }
  const parent = d.kind === 'mount' ? d.path : dirname(d.path);
  return { target: d.path, parent, daemonParent: config.hardLinkRoot };
}

export function newProgress(name: string, spec: ModelVersionSpec, rule: TaskIdRule = DEFAULT_TASK_ID_RULE) {
  const location = specLocation(spec);
  // Without filter headers the daemon applies its default filter, so the id it computes is under that filter.
  const filter = spec.filter ?? (location ? effectiveFilter(location) : DEFAULT_FILTERED_QUERY_PARAMS);
  const files: FileProgress[] = spec.files.map((f) => {
    let expectedTaskID: string | undefined;
    try {
      // A key's id depends on the credentials' tag: known once the agent signs it (downloadFile).
      const url = f.url;
      if (url !== undefined && filter !== undefined)
        expectedTaskID = taskID({
          url,
          filter,
          tag: spec.tag,
          application: spec.application,
          pieceLength: spec.pieceLength,
          rule,
        });
    } catch {
      // a location that cannot make URLs fails the download with its own message
    }
    return { path: f.path, size: f.size, bytes: 0, state: 'Pending', expectedTaskID };
  });
  const progress: VersionProgress = {
    name,
    version: spec.version,
    directory: spec.directory ?? name,
    state: 'Downloading',
    filesTotal: files.length,
    filesDone: 0,
    bytesTotal: files.reduce((s, f) => s + (f.size ?? 0), 0),
    bytesDone: 0,
    localHits: 0,
    hardLinks: 0,
    startedAt: new Date().toISOString(),
    files,
  };
  return progress;
}

/** The request headers of the preheat's task identity (the plugin's: both filter headers, tag, application...). */
export function identityHeaders(spec: ModelVersionSpec): Record<string, string> {
  const location = specLocation(spec);
  const filter = spec.filter ?? (location ? effectiveFilter(location) : undefined);
  const h: Record<string, string> = { ...(spec.headers ?? {}) };
  // No filter given and no storage kind to take one from: no header, so the daemon applies its default filter.
  if (filter !== undefined && filter.length > 0) Object.assign(h, filterHeaders(filter));
  if (spec.tag) h[TAG_HEADER] = spec.tag;
  if (spec.application) h[APPLICATION_HEADER] = spec.application;
  if (spec.pieceLength !== undefined) h[PIECE_LENGTH_HEADER] = String(spec.pieceLength);
  return h;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

const statfsFree = async (path: string): Promise<number> => {
  const fs = await statfs(path);
  return fs.bavail * fs.bsize;
};

/**
 * Checks what can be checked before a byte is written; throws {@link DownloadRefused}. Returns the target path,
 * or undefined when the version is already in place (nothing to do).
 */
export async function preflight(
  name: string,
  spec: ModelVersionSpec,
  config: DownloaderConfig,
): Promise<string | undefined> {
  const { target, parent } = placement(name, spec, config);
  // A mount point exists before anything is placed in it: it is placed every time.
  if (config.destination?.kind !== 'mount' && (await exists(target))) return undefined;
  if (spec.files.some((f) => f.key !== undefined) && !config.credentials)
    throw new DownloadRefused(
      400,
      PlaceReason.NoCredentials,
      'files give object keys but the agent has no credentials to sign them: mount the storage Secret and pass --credentials-dir, or send signed URLs',
    );
  const location = specLocation(spec);
  if (location && spec.files.some((f) => f.key !== undefined)) {
    const storageHosts = config.storageHosts ?? defaultStorageHosts();
    const reach = storageReach(location, 'storage', { storageHosts }, "the agent's");
    if (!reach.allowed) throw new DownloadRefused(422, reach.reason, reach.message);
  }
  const maxBytes = Math.min(config.limits.maxBytes, spec.maxBytes ?? Infinity);
  const known = spec.files.reduce((s, f) => s + (f.size ?? 0), 0);
  if (known > maxBytes)
    throw new DownloadRefused(
      413,
      PlaceReason.DiskBudgetExceeded,
      `version ${spec.version} of ${name} holds ${known} bytes, above the cap of ${maxBytes} bytes: raise the agent's --max-bytes (or the request's maxBytes), or make the model smaller`,
    );
  await mkdir(parent, { recursive: true });
  const free = await (config.freeBytes ?? statfsFree)(parent);
  // A hard link takes no blocks of its own, but a refused one is streamed: count every byte.
  if (free - known < config.limits.minFreeBytes)
    throw new DownloadRefused(
      507,
      PlaceReason.InsufficientStorage,
      `version ${spec.version} of ${name} needs ${known} bytes; ${free} are free and ${config.limits.minFreeBytes} must stay free (--min-free-bytes): free space on the model volume or make it larger`,
    );
  return target;
}

/** One version's download as it runs: what every file's download shares. */
interface Run {
  name: string;
  spec: ModelVersionSpec;
  config: DownloaderConfig;
  progress: VersionProgress;
  /** Where the version lands (a mount point: where its entries are moved). */
  target: string;
  tmp: string;
  /** `tmp` as the peer daemon sees it, when files are asked for as hard links. */
  daemonTmp: string | undefined;
  /** Where tar layers wait for their extraction: beside `tmp`, so no archive entry can meet them. */
  blobs: string;
  /** The only file, a tar archive to extract as KServe's initializer does (a `mount` destination's option). */
  singleArchive: boolean;
  /** The digests served wrongly before (refetch.ts), read once for the placement. */
  poisoned: ReadonlySet<string>;
  signal: AbortSignal;
  deadline: AbortSignal;
  deadlineMs: number;
  cancel: AbortSignal | undefined;
  maxBytes: number;
  headers: Record<string, string>;
  written: number;
  log: Logger | undefined;
}

/** Marks the version failed (the first failure wins: later ones are its consequences). */
function fail(run: Run, reason: string, message: string, file?: string): void {
  if (run.progress.state !== 'Downloading') return;
  run.progress.state = 'Failed';
  run.progress.reason = reason;
  run.progress.error = redact(message);
  run.progress.failedFile = file;
}

/** Whether file `i` is an archive to extract: it then waits in `blobs`, never in the version's directory. */
const isArchive = (run: Run, i: number): boolean =>
  run.spec.files[i]!.extract !== undefined || run.singleArchive;

/**
 * The signed URL of file `i` and its tag: a URL as given with the spec's tag, or a key signed now with the mounted
 * credentials, with the tag those credentials give (storage/credential-tag.ts: the preheat's, made with the same
 * credentials), so that only holders of the credentials share the task.
 */
async function urlOf(run: Run, i: number): Promise<{ url: string; tag: string | undefined }> {
  const file = run.spec.files[i]!;
  if (file.url !== undefined) return { url: file.url, tag: run.spec.tag || undefined };
  const location = specLocation(run.spec)!;
  const credentials = await run.config.credentials!(location.type);
  const signed = await signObjectURL(location, file.key!, credentials, {
    expiresSeconds: run.spec.storage!.expiresSeconds,
  });
  return { url: signed.url, tag: taskTag(run.spec.tag, credentialTag(location, credentials)) };
}

/** The task id file `i` should have, with the tag its download sends. */
function expectedID(run: Run, url: string, tag: string | undefined): string | undefined {
  const location = specLocation(run.spec);
  const filter = run.spec.filter ?? (location ? effectiveFilter(location) : DEFAULT_FILTERED_QUERY_PARAMS);
  return taskID({
    url,
    filter,
    tag,
    application: run.spec.application,
    pieceLength: run.spec.pieceLength,
    rule: run.config.rule ?? DEFAULT_TASK_ID_RULE,
  });
}

/** Counts `n` more bytes of file `i`; throws past the byte cap (which stops that download). */
function countBytes(run: Run, i: number, n: number): void {
  run.written += n;
  run.progress.files[i]!.bytes += n;
  run.progress.bytesDone += n;
  if (run.written > run.maxBytes)
    throw new DownloadRefused(
      413,
      PlaceReason.DiskBudgetExceeded,
      `version ${run.spec.version} of ${run.name} passed the cap of ${run.maxBytes} bytes while downloading ${run.spec.files[i]!.path}: raise the agent's --max-bytes (or the request's maxBytes)`,
    );
}

/**
 * Checks file `i` against its published sha256, when it has one: by the hash of its body as it arrived
 * (`received`, `sha256:<hex>`), or, for a local hit's link whose body was never read, by reading it back.
 */
async function checkFile(run: Run, i: number, received: string | undefined, what: string): Promise<void> {
  const file = run.spec.files[i]!;
  if (file.sha256 === undefined) return;
  const path = join(isArchive(run, i) ? run.blobs : run.tmp, file.path);
  checkSha256(received?.slice('sha256:'.length) ?? (await sha256File(path, run.signal)), file.sha256, what);
}

/** Records why file `i` failed, and fails the version for it. */
function fileFailed(run: Run, i: number, e: unknown): void {
  const { name, spec, progress } = run;
  const fp = progress.files[i]!;
  fp.state = 'Failed';
  if (run.deadline.aborted) {
    fp.error = 'deadline exceeded';
    fail(
      run,
      PlaceReason.DeadlineExceeded,
      `version ${spec.version} of ${name} was not complete within ${run.deadlineMs / 1000} s (${progress.filesDone} of ${progress.filesTotal} files)`,
    );
  } else if (run.cancel?.aborted) {
    fp.error = 'cancelled';
    fail(run, PlaceReason.Cancelled, `the download of version ${spec.version} of ${name} was cancelled`);
  } else {
    const message = e instanceof Error ? e.message : String(e);
    fp.error = redact(message);
    if (e instanceof FetchError) Object.assign(fp, { status: e.status || undefined, errorType: e.errorType });
    const reason =
      e instanceof PlaceError
        ? e.reason
        : e instanceof FetchError
          ? PlaceReason.DownloadFailed
          : PlaceReason.WriteFailed;
    fail(run, reason, message, fp.path);
  }
}

/** Downloads file `i` into the temporary directory and records the outcome. */
async function downloadFile(run: Run, i: number): Promise<void> {
  const { name, spec, config, progress } = run;
  const file = spec.files[i]!;
  const fp = progress.files[i]!;
  const what = file.layer ?? `${name}/${spec.version}/${file.path}`;
  fp.state = 'Downloading';
  try {
    const signed = await urlOf(run, i);
    const { url } = signed;
    // A digest served wrongly before is asked for under a fresh task: the old one holds those bytes (refetch.ts).
    const tag = refetchTag(
      signed.tag,
      file.sha256 ? await refetchCount(config.root, file.sha256, run.poisoned) : 0,
    );
    fp.expectedTaskID = expectedID(run, url, tag);
    // The file's set (its source's credential, sent once in the spec), then what an older operator put per file.
    const set = file.headerSet !== undefined ? spec.headerSets?.[file.headerSet] : undefined;
    const headers = { ...run.headers, ...set, ...file.headers };
    if (tag) headers[TAG_HEADER] = tag;
    const asked = performance.now();
    const r = await fetchFile({
      dispatcher: config.dispatcher,
      proxy: config.proxy,
      url,
      headers,
      target: join(isArchive(run, i) ? run.blobs : run.tmp, file.path),
      expectedSize: file.size,
      // An archive is read once and removed: a link of the daemon's copy would save nothing.
      hardLink:
        run.daemonTmp !== undefined && !isArchive(run, i)
          ? { local: run.tmp, daemon: run.daemonTmp, serverUid: config.serverUid }
          : undefined,
      signal: run.signal,
      what,
      sha256: file.sha256 !== undefined,
      onBytes: (n) => countBytes(run, i, n),
      onRetry: (why, attempt) =>
        run.log?.warn({ file: file.path, attempt, why }, 'the peer daemon cut the download; asking again'),
    });
    const fetched = performance.now();
    fp.taskID = r.taskID; // a mismatch's report names the task that served the bytes
    await checkFile(run, i, r.sha256, what);
    Object.assign(fp, {
      state: 'Done',
      localHit: r.localHit,
      hardLink: r.hardLink,
      hardLinkFallback: r.hardLinkFallback,
    });
    if (fp.size === undefined) progress.bytesTotal += r.bytes;
    progress.filesDone++;
    if (r.localHit) progress.localHits++;
    if (r.hardLink) progress.hardLinks++;
    run.log?.debug({ file: file.path, ...fetchLogFields(r, asked, fetched) }, 'file done');
  } catch (e) {
    if (e instanceof ChecksumMismatch && file.sha256) {
      const count = await markPoisoned(config.root, file.sha256);
      run.log?.warn({ file: file.path, taskID: fp.taskID, refetch: count }, 'other bytes than published');
    }
    fileFailed(run, i, e);
  }
}

/**
 * The tar layers, in the spec's order, unpacked over the other files (whose paths an archive may not take), with
 * the version's byte cap and the agent's file cap over all of them; or the single archive of a `mount`
 * destination, unpacked alone (mount.ts). An unsafe entry, an unreadable archive or a cap fails the version,
 * naming the layer; nothing is placed.
 */
async function extractArchives(run: Run): Promise<void> {
  const { spec } = run;
  if (!spec.files.some((_, i) => isArchive(run, i))) return;
  const plain = spec.files.filter((_, i) => !isArchive(run, i));
  const state = newExtractState();
  for (const f of plain) state.regular.add(f.path);
  state.files = plain.length;
  state.bytes = plain.reduce((s, f) => s + (f.size ?? 0), 0);
  // What a tar layer unpacks to is known only as it streams: the free space is read before and during it.
  const limits = {
    maxBytes: run.maxBytes,
    maxFiles: run.config.limits.maxFiles ?? DEFAULT_MAX_FILES,
    minFreeBytes: run.config.limits.minFreeBytes,
    freeBytes: run.config.freeBytes,
  };
  for (const [i, f] of spec.files.entries()) {
    if (!isArchive(run, i)) continue;
    const what = f.layer ?? `${run.name}/${spec.version}/${f.path}`;
    const blob = join(run.blobs, f.path);
    try {
      const r = f.extract
        ? await extractLayer(blob, f.extract, run.tmp, what, limits, state)
        : await extractArchive(blob, run.tmp, limits);
      run.progress.files[i]!.extracted = r.files;
    } catch (e) {
      run.progress.files[i]!.state = 'Failed';
      run.progress.files[i]!.error = redact((e as Error).message);
      fail(run, e instanceof PlaceError ? e.reason : PlaceReason.WriteFailed, (e as Error).message, f.path);
      return;
    }
  }
}

/** A placement's shared state, with its temporary directories named (not made yet). */
function newRun(
  name: string,
  spec: ModelVersionSpec,
  config: DownloaderConfig,
  progress: VersionProgress,
  signal: AbortSignal | undefined,
  poisoned: ReadonlySet<string>,
): Run {
  const { target, parent, daemonParent } = placement(name, spec, config);
  const d = config.destination;
  const label = d?.kind === 'directory' ? basename(d.path) : spec.version;
  // A mount's staging directory carries the prefix a later run's clean-up knows (mount.ts removeStaleStaging).
  const tmpName = `${d?.kind === 'mount' ? STAGING_PREFIX : `${TEMP_PREFIX}${label}-`}${randomBytes(4).toString('hex')}`;
  const deadlineMs = Math.min(config.limits.deadlineMs, (spec.deadlineSeconds ?? Infinity) * 1000);
  const deadline = AbortSignal.timeout(deadlineMs);
  const only = spec.files.length === 1 ? spec.files[0]! : undefined;
  return {
    name,
    spec,
    config,
    progress,
    target,
    tmp: join(parent, tmpName),
    daemonTmp: daemonParent !== undefined ? join(daemonParent, tmpName) : undefined,
    blobs: join(parent, `${tmpName}.blobs`),
    singleArchive:
      d?.kind === 'mount' &&
      d.extractSingleArchive === true &&
      only?.extract === undefined &&
      archiveKind(only?.path ?? '') === 'tar',
    poisoned,
    signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
    deadline,
    deadlineMs,
    cancel: signal,
    maxBytes: Math.min(config.limits.maxBytes, spec.maxBytes ?? Infinity),
    headers: identityHeaders(spec),
    written: 0,
    log: config.logger?.child({ model: name, version: spec.version }),
  };
}

/** The complete temporary directory into its destination: renamed whole, or its entries moved into a mount. */
async function putInPlace(run: Run): Promise<void> {
  if (run.config.destination?.kind === 'mount') {
    await moveEntries(run.tmp, run.target);
    await rm(run.tmp, { recursive: true, force: true });
    return;
  }
  if (await exists(run.target)) throw new Error(`${run.target} appeared while downloading`);
  await rename(run.tmp, run.target);
}

/**
 * Downloads every file of `spec` into a temporary directory and puts it in place (config.destination); `progress`
 * is updated as it goes (what `GET /v1/models/{name}` reports). Resolves with the final progress (Ready or
 * Failed); never throws for a download's failure. Call {@link preflight} first.
 */
export async function downloadVersion(
  name: string,
  spec: ModelVersionSpec,
  config: DownloaderConfig,
  progress: VersionProgress,
  signal?: AbortSignal,
): Promise<VersionProgress> {
  const checked = spec.files.some((f) => f.sha256 !== undefined);
  const run = newRun(
    name,
    spec,
    config,
    progress,
    signal,
    checked ? await poisonedDigests(config.root) : new Set(),
  );
  const layout = (config.destination ?? { kind: 'version' }).kind === 'version';
  try {
    await mkdir(run.tmp, { recursive: true });
    if (spec.files.some((_, i) => isArchive(run, i))) await mkdir(run.blobs);
    let next = 0;
    const worker = async () => {
      while (progress.state === 'Downloading' && next < spec.files.length) await downloadFile(run, next++);
    };
    await Promise.all(
      Array.from({ length: Math.min(config.limits.concurrency, spec.files.length) }, () => worker()),
    );
    if (progress.state === 'Downloading') await extractArchives(run);
    if (progress.state === 'Downloading') {
      await putInPlace(run);
      progress.state = 'Ready';
    }
  } catch (e) {
    fail(
      run,
      PlaceReason.WriteFailed,
      `cannot place version ${spec.version} of ${name}: ${e instanceof Error ? e.message : String(e)}`,
    );
  } finally {
    if (progress.state !== 'Ready')
      await rm(run.tmp, { recursive: true, force: true }).catch(() => undefined);
    await rm(run.blobs, { recursive: true, force: true }).catch(() => undefined);
    if (progress.state !== 'Ready' && layout)
      await removeEmptyModelDirectory(config.root, spec.directory ?? name);
    progress.finishedAt = new Date().toISOString();
  }
  const { filesTotal: files, bytesDone: bytes, localHits, hardLinks, reason, error } = progress;
  // The record is of the agent's layout: a version an agent on the same root reports.
  if (progress.state === 'Ready' && layout)
    await writeRecord(config.root, progress).catch((e: unknown) =>
      run.log?.warn(
        { err: e },
        'the record of the download was not written (its local hits will not be known)',
      ),
    );
  if (progress.state === 'Ready') run.log?.info({ files, bytes, localHits, hardLinks }, 'version ready');
  else run.log?.warn({ reason, error }, 'version failed');
  return progress;
}

/**
 * Removes the model's directory when nothing is left in it (preflight made it; a failed download or the removal
 * of its last version leaves it empty), so a model that never got a version leaves no trace in the server's
 * repository (a server that lists its repository would show an empty model). rmdir(2) removes only an empty
 * directory, atomically: a download of another version that made its temporary directory in it keeps it.
 */
export async function removeEmptyModelDirectory(root: string, directory: string): Promise<void> {
  await rmdir(join(root, directory)).catch(() => undefined);
}

/** Removes temporary directories a previous run left behind (a crash mid-download) under each model directory. */
export async function removeStaleTemporaries(root: string): Promise<string[]> {
  const removed: string[] = [];
  const models = await readdir(root, { withFileTypes: true }).catch(() => []);
  for (const m of models) {
    if (!m.isDirectory()) continue;
    const entries = await readdir(join(root, m.name), { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (e.isDirectory() && e.name.startsWith(TEMP_PREFIX)) {
        await rm(join(root, m.name, e.name), { recursive: true, force: true });
        removed.push(join(m.name, e.name));
      }
    }
  }
  return removed;
}
