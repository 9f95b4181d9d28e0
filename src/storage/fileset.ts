/**
 * A model as a directory: a "file set" of objects under one prefix of a storage location, chosen by include /
 * exclude glob patterns (or given as an explicit list), bounded in count and bytes, each with its object URL and
 * its P2P task id; and the plan that splits the set's URLs into manager preheat jobs. Pure: no I/O, no clock
 * (listing a prefix is list.ts).
 *
 * A file's path is its key relative to the prefix; it is where the file lands under the model's directory, so a
 * key that cannot be a relative file path (an empty, `.` or `..` segment) is refused rather than written anywhere
 * unexpected. Keys ending in `/` are the "folder" placeholders some consoles create and are never files.
 *
 * Globs are Node's own `path.posix.matchesGlob` (the minimatch dialect: `*`, `**`, `?`, `[...]`, `{a,b}`), matched
 * against the relative path; as in a shell, `*` does not match a leading dot, so `**\/*` leaves dot files out unless
 * a pattern names them (`**\/.*`). A pattern equal to a path matches it too (the only way to exclude a key with a
 * `..` segment, which no glob matches).
 */
import { posix } from 'node:path';
import { effectiveFilter, objectURL, type StorageLocation } from './objecturl.ts';
import { DEFAULT_TASK_ID_RULE, taskID, type TaskIdRule } from './taskid.ts';

import { DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES } from '../api/fileset.ts';

export { DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES };

/** What a model directory is made of, before it is listed. */
export interface FileSetSpec {
  /** The key prefix of the directory (`models/llama/`); a missing trailing `/` is added. `''`: the bucket root. */
  prefix: string;
  /**
   * Explicit file paths relative to the prefix (no listing). Sizes are then unknown until download, so the byte
   * cap is checked by the downloader.
   */
  files?: readonly string[] | undefined;
  /** Glob patterns on the relative path; a file is kept when it matches one. Absent or empty: every file. */
  include?: readonly string[] | undefined;
  /** Glob patterns on the relative path; a file that matches one is left out (after include). */
  exclude?: readonly string[] | undefined;
  maxFiles?: number | undefined;
  maxBytes?: number | undefined;
}

/** An object as the provider's list API returns it. */
export interface ListedObject {
  key: string;
  /** Bytes; absent when unknown (an explicit list). */
  size?: number | undefined;
}

/** One file of a model directory. */
export interface FileSetFile {
  /** The object key. */
  key: string;
  /** The path under the model directory (the key relative to the prefix). */
  path: string;
  size?: number | undefined;
}

/** A file with what the P2P network knows it by. */
export interface FileSetEntry extends FileSetFile {
  /** The unsigned object URL (the signed one extends it; sign.ts). */
  url: string;
  taskID: string;
}

/** The task identity shared by every file of a set (the preheat's, which the downloads must repeat). */
export interface FileSetIdentity {
  /** Query parameter names left out of the ids; absent: the location's effective filter. */
  filter?: readonly string[] | undefined;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  rule?: TaskIdRule | undefined;
}

/** A file set that cannot be used as given; `field` names the spec field to change. */
export class FileSetError extends Error {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.name = 'FileSetError';
    this.field = field;
  }
}

/** The prefix as listed: `''` or ending in exactly one `/`; a leading `/` is refused (keys never start with one). */
export function normalisePrefix(prefix: string): string {
  if (prefix.startsWith('/'))
    throw new FileSetError('prefix', `prefix "${prefix}" must not start with "/" (object keys do not)`);
  return prefix === '' ? '' : prefix.replace(/\/*$/, '/');
}

/** Why a relative path cannot be a file under the model directory, or undefined when it can. */
export function pathProblem(path: string): string | undefined {
  if (path === '') return 'it is empty';
  if (path.startsWith('/')) return 'it is absolute';
  if (path.includes('\0')) return 'it contains a NUL byte';
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') return `it has an empty, "." or ".." segment`;
  }
  return undefined;
}

function checkLimit(value: number | undefined, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new FileSetError(field, `${field} must be a positive integer, got ${value}`);
  return value;
}

/** A glob match, or the path written out: globs never match a path with `.`/`..`/empty segments. */
function matchesAny(path: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => p === path || posix.matchesGlob(path, p));
}

/**
 * The files of a set: from the listed objects (`listed`, for a prefix) or from `spec.files`; include/exclude
 * applied, sorted by path, caps checked. Throws {@link FileSetError} naming the field and the fix.
 */
export function selectFiles(spec: FileSetSpec, listed?: readonly ListedObject[]): FileSetFile[] {
  const prefix = normalisePrefix(spec.prefix);
  const maxFiles = checkLimit(spec.maxFiles, 'maxFiles', DEFAULT_MAX_FILES);
  const maxBytes = checkLimit(spec.maxBytes, 'maxBytes', DEFAULT_MAX_BYTES);
  const include = spec.include ?? [];
  const exclude = spec.exclude ?? [];
  const where = prefix === '' ? 'the bucket root' : `prefix "${prefix}"`;

  let candidates: FileSetFile[];
  if (spec.files !== undefined) {
    if (listed !== undefined) throw new Error('selectFiles: give either spec.files or listed objects');
    candidates = spec.files.map((path, i) => {
      const problem = pathProblem(path);
      if (problem)
        throw new FileSetError(
          `files[${i}]`,
          `files[${i}] "${path}" is not a relative file path: ${problem}`,
        );
      return { key: prefix + path, path };
    });
  } else {
    if (listed === undefined) throw new Error('selectFiles: a prefix needs its listed objects');
    candidates = [];
    for (const o of listed) {
      if (!o.key.startsWith(prefix) || o.key.endsWith('/')) continue; // folder placeholders are not files
      candidates.push({ key: o.key, path: o.key.slice(prefix.length), size: o.size });
    }
  }

  const chosen = candidates.filter(
    (f) => (include.length === 0 || matchesAny(f.path, include)) && !matchesAny(f.path, exclude),
  );
  // Checked after the patterns: a key that is excluded never has to be a valid path.
  for (const f of chosen) {
    const problem = pathProblem(f.path);
    if (problem)
      throw new FileSetError(
        'exclude',
        `object "${f.key}" under ${where} cannot be a file of the model directory: ${problem}; exclude it (exclude: [${JSON.stringify(f.path)}])`,
      );
  }
  const seen = new Set<string>();
  for (const f of chosen) {
    if (seen.has(f.path))
      throw new FileSetError('files', `file "${f.path}" is listed twice; list every file once`);
    seen.add(f.path);
  }
  if (chosen.length === 0)
    throw new FileSetError(
      spec.files !== undefined ? 'files' : 'include',
      spec.files !== undefined
        ? 'files is empty: list at least one file'
        : `no object under ${where} matches include/exclude (${candidates.length} listed): check the prefix and the patterns`,
    );
  if (chosen.length > maxFiles)
    throw new FileSetError(
      'maxFiles',
      `${chosen.length} files under ${where} match include/exclude, above maxFiles ${maxFiles}: narrow include/exclude or raise maxFiles`,
    );
  const bytes = totalBytes(chosen);
  if (bytes > maxBytes)
    throw new FileSetError(
      'maxBytes',
      `the ${chosen.length} files under ${where} hold ${bytes} bytes, above maxBytes ${maxBytes}: narrow include/exclude or raise maxBytes`,
    );
  // Byte order, so the plan and the status are stable whatever order the provider listed in.
  return chosen.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/** The sum of the known sizes. */
export function totalBytes(files: readonly { size?: number | undefined }[]): number {
  return files.reduce((sum, f) => sum + (f.size ?? 0), 0);
}

/** Each file's object URL and task id, under one identity. */
export function fileSetEntries(
  location: StorageLocation,
  files: readonly FileSetFile[],
  identity: FileSetIdentity = {},
): FileSetEntry[] {
  const filter = identity.filter ?? effectiveFilter(location);
  const rule = identity.rule ?? DEFAULT_TASK_ID_RULE;
  return files.map((f) => {
    const url = objectURL(location, f.key);
    const id = taskID({
      url,
      filter,
      tag: identity.tag,
      application: identity.application,
      pieceLength: identity.pieceLength,
      rule,
    });
    return { ...f, url, taskID: id };
  });
}

/**
 * How many URLs one preheat job carries at most. The manager (v2.5.1) puts no cap on `urls[]` itself (its binding
 * is `omitempty`, and job args are a longtext column), but one job's URLs share ONE `timeout` (default 60 min) and
 * run `concurrent_task_count` (default 8, at most 100) at a time, and one job's result lists a task per URL and
 * peer: a bound per job keeps a job's time, its result and what a failed job costs to redo bounded.
 */
export const DEFAULT_MAX_URLS_PER_JOB = 100;

export interface PreheatPlanLimits {
  /** URLs per job; default {@link DEFAULT_MAX_URLS_PER_JOB}. */
  maxURLsPerJob?: number | undefined;
  /**
   * Known bytes per job: with the job's one timeout, this is what a job can fetch in time (files of unknown size
   * count 0). A single file larger than it gets a job of its own. Default: no byte bound.
   */
  maxBytesPerJob?: number | undefined;
}

/**
 * The set's files in preheat jobs, in order: a new job starts when the next file would pass either bound. Every
 * file is in exactly one job; no job is empty.
 */
export function planPreheatJobs<T extends { url: string; size?: number | undefined }>(
  files: readonly T[],
  limits: PreheatPlanLimits = {},
): T[][] {
  const maxURLs = checkLimit(limits.maxURLsPerJob, 'maxURLsPerJob', DEFAULT_MAX_URLS_PER_JOB);
  const maxBytes = checkLimit(limits.maxBytesPerJob, 'maxBytesPerJob', Number.MAX_SAFE_INTEGER);
  const jobs: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const f of files) {
    const size = f.size ?? 0;
    if (current.length > 0 && (current.length >= maxURLs || bytes + size > maxBytes)) {
      jobs.push(current);
      current = [];
      bytes = 0;
    }
    current.push(f);
    bytes += size;
  }
  if (current.length > 0) jobs.push(current);
  return jobs;
}
