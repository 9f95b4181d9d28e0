/**
 * A directory preheat (spec.objectStorage.prefix): the prefix listed with the preheat's credentials through the
 * provider's list API, the files chosen by include/exclude and bounded by the caps (src/storage/fileset.ts), each
 * file's task id, and the split into manager jobs.
 *
 * A directory's content is identified by the generation: the prefix is listed once per generation and the listing
 * kept in memory (never in status: a thousand paths would not fit). Status keeps its digest, so a listing made
 * again after an operator restart (to retry a failed job, or to evict every file's task) is checked against the
 * content this generation started with.
 */
import { createHash } from 'node:crypto';
import type { ModelPreheat, ModelPreheatSpec, ObjectStorageSource } from '../../api/index.ts';
import type { StorageCredentials } from '../../storage/credentials.ts';
import {
  fileSetEntries,
  planPreheatJobs,
  selectFiles,
  totalBytes,
  type FileSetFile,
  type FileSetSpec,
  type ListedObject,
} from '../../storage/fileset.ts';
import { ListError, listPrefix, type ListOptions } from '../../storage/list.ts';
import { effectiveFilter, objectURL } from '../../storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, type TaskIdRule } from '../../storage/taskid.ts';
import { objectStorageTag } from './request.ts';

/** Whether a spec preheats a directory. */
export const isDirectory = (spec: ModelPreheatSpec): boolean => spec.objectStorage?.prefix !== undefined;

/** The file-set rules of spec.objectStorage (a prefix). */
export function fileSetSpecOf(os: ObjectStorageSource): FileSetSpec {
  return {
    prefix: os.prefix ?? '',
    include: os.include,
    exclude: os.exclude,
    maxFiles: os.maxFiles,
    maxBytes: os.maxBytes,
  };
}

/** One generation's listing. */
export interface DirectoryListing {
  uid: string;
  generation: number;
  files: FileSetFile[];
  bytes: number;
  digest: string;
}

/** A digest of the chosen files (path and size, in order): equal listings, equal digests. */
export function listingDigest(files: readonly FileSetFile[]): string {
  const h = createHash('sha256');
  for (const f of files) h.update(`${f.path}\0${f.size ?? ''}\n`);
  return h.digest('hex').slice(0, 16);
}

/**
 * The operator's listing: the provider's list API, except where it would hand a bearer credential to a host the
 * spec chose. s3, oss (SigV4) and abs (Shared Key) send a signature of one request, never the key; gcs sends an
 * OAuth access token, so a gcs prefix is listed at Google's own endpoint only.
 */
export const operatorLister: Lister = (location, credentials, prefix, opts) => {
  if (location.type === 'gcs' && location.endpoint !== undefined)
    return Promise.reject(
      new ListError(
        `not listing gcs ${location.bucket} prefix "${prefix}" at ${location.endpoint}: a gcs listing sends an access token to the endpoint, so the operator lists at storage.googleapis.com only; remove objectStorage.endpoint, or name the files one by one`,
      ),
    );
  return listPrefix(location, credentials, prefix, opts);
};

export type Lister = (
  location: ObjectStorageSource,
  credentials: StorageCredentials,
  prefix: string,
  opts: ListOptions,
) => Promise<ListedObject[]>;

/**
 * The listing of each directory preheat, by `namespace/name`, for its current generation only. Listing errors are
 * the lister's (`ListError`, redacted); a listing that finds nothing or passes a cap is a `FileSetError` naming
 * the field.
 */
export class DirectoryListings {
  private readonly byKey = new Map<string, DirectoryListing>();
  private readonly lister: Lister;

  constructor(lister: Lister = operatorLister) {
    this.lister = lister;
  }

  /** The listing kept for this generation, if any (no I/O). */
  kept(obj: ModelPreheat): DirectoryListing | undefined {
    const l = this.byKey.get(keyOf(obj));
    return l && l.uid === obj.metadata.uid && l.generation === obj.metadata.generation ? l : undefined;
  }

  /** The listing of this generation: the kept one, else the prefix listed now. */
  async of(
    obj: ModelPreheat,
    spec: ModelPreheatSpec,
    credentials: () => Promise<StorageCredentials>,
    signal?: AbortSignal,
  ): Promise<DirectoryListing> {
    const kept = this.kept(obj);
    if (kept) return kept;
    const os = spec.objectStorage!;
    const rules = fileSetSpecOf(os);
    const listed = await this.lister(os, await credentials(), os.prefix ?? '', { signal });
    const files = selectFiles(rules, listed);
    const listing = {
      uid: obj.metadata.uid ?? '',
      generation: obj.metadata.generation ?? 0,
      files,
      bytes: totalBytes(files),
      digest: listingDigest(files),
    };
    this.byKey.set(keyOf(obj), listing);
    return listing;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }
}

const keyOf = (obj: ModelPreheat) => `${obj.metadata.namespace}/${obj.metadata.name}`;

/** The listing's files in manager jobs (100 URLs a job), in path order: job k always carries the same files. */
export const directoryChunks = (files: readonly FileSetFile[]): FileSetFile[][] =>
  planPreheatJobs(files.map((f) => ({ ...f, url: f.key }))).map((job) => job.map(({ url: _, ...f }) => f));

/**
 * Every file's task id as the peers compute it for this spec's jobs: the filter the jobs carry (the location's,
 * or the manager's default when that is empty), the spec's tag with the credentials' (objectStorageTag),
 * application and piece length.
 */
export function directoryTasks(
  spec: ModelPreheatSpec,
  files: readonly FileSetFile[],
  rule: TaskIdRule,
  credentials: StorageCredentials,
): { url: string; taskID: string; path: string }[] {
  const os = spec.objectStorage!;
  const own = effectiveFilter(os);
  const filter = own.length > 0 ? own : [...DEFAULT_FILTERED_QUERY_PARAMS];
  return fileSetEntries(os, files, {
    filter,
    tag: objectStorageTag(spec, credentials),
    application: spec.application,
    pieceLength: spec.pieceLength,
    rule,
  }).map((e) => ({ url: e.url, taskID: e.taskID, path: e.path }));
}

/** A lookup of the file a (signed) URL of the directory names, by its URL without the query. */
export function pathsByURL(
  os: ObjectStorageSource,
  files: readonly FileSetFile[],
): (url: string) => string | undefined {
  const paths = new Map(files.map((f) => [objectURL(os, f.key), f.path]));
  return (url) => paths.get(url.split('?')[0]!);
}
