/**
 * A repository's files at one commit, as a model directory: the revision resolved to its sha, the tree listed at
 * that sha (nested paths, sizes, LFS sha256), include/exclude and the maxFiles/maxBytes caps applied by the same
 * rules as an object-storage directory (src/storage/fileset.ts), the whole listing under one time-out and one
 * bound on the entries held.
 */
import { DEFAULT_MAX_FILES, MAX_DIRECTORY_FILES } from '../api/fileset.ts';
import { FileSetError, selectFiles, type FileSetSpec } from '../storage/fileset.ts';
import type { HubClient } from './client.ts';
import { HubReason, hubError } from './errors.ts';

/** What chooses and bounds the files, as for an object-storage directory. */
export type HubSelection = Pick<FileSetSpec, 'include' | 'exclude' | 'maxFiles' | 'maxBytes'>;

export interface HubListingLimits {
  /** The whole listing (revision and every page), ms. */
  timeoutMs: number;
  /** Tree entries held at most while listing, before include/exclude (a repository is refused above it). */
  maxEntries: number;
}

export const DEFAULT_LISTING_LIMITS: HubListingLimits = { timeoutMs: 120_000, maxEntries: 100_000 };

export interface HubFile {
  /** Path in the repository: where the file lands under the model directory. */
  path: string;
  size: number;
  /** The LFS object's sha256 (LFS files only): what the downloaded bytes must hash to. */
  sha256?: string | undefined;
  /** The git blob id (of the LFS pointer, for an LFS file). */
  blobId: string;
}

export interface HubListing {
  /** The repository as asked for (the directory it lands in). */
  repo: string;
  /** The name the Hub serves it under now, when it redirected a renamed repository: its files' URLs use it. */
  movedTo?: string | undefined;
  revision: string;
  /** The commit the revision named when it was listed. */
  sha: string;
  files: HubFile[];
}

/**
 * The commit `revision` names, the repository's name now (another after a rename) and its tree at that commit,
 * under the listing's one deadline and entry bound.
 */
async function treeAtRevision(
  client: HubClient,
  repo: string,
  revision: string,
  limits: HubListingLimits,
  signal: AbortSignal | undefined,
) {
  const operation = `list ${repo}@${revision}`;
  const deadline = AbortSignal.timeout(limits.timeoutMs);
  const both = signal ? AbortSignal.any([signal, deadline]) : deadline;
  try {
    const { sha, repo: current } = await client.revisionOf(repo, revision, both);
    const tree = await client.listTree(current, sha, {
      signal: both,
      onPage: (n) => {
        if (n > limits.maxEntries)
          throw hubError(
            HubReason.TooLarge,
            operation,
            `${repo} holds more than ${limits.maxEntries} entries: the listing stops there; a model directory holds at most ${MAX_DIRECTORY_FILES} files`,
            { field: 'repo' },
          );
      },
    });
    const first = tree.find((e) => e.type === 'file');
    if (first) await client.fileLocation(current, sha, first.path, both);
    return { sha, current, tree };
  } catch (e) {
    if (deadline.aborted && !signal?.aborted)
      throw hubError(
        HubReason.ListingTimeout,
        operation,
        `the listing took longer than ${limits.timeoutMs / 1000} s: the Hub is slow or the repository very large; try later or narrow the repository`,
        { kind: 'retryable', cause: e },
      );
    throw e;
  }
}

/** Lists `repo` at `revision`; throws {@link HubError} naming the field to change. */
export async function listRepoFiles(
  client: HubClient,
  repo: string,
  revision: string,
  selection: HubSelection = {},
  limits: HubListingLimits = DEFAULT_LISTING_LIMITS,
  signal?: AbortSignal,
): Promise<HubListing> {
  const operation = `list ${repo}@${revision}`;
  const { sha, current, tree } = await treeAtRevision(client, repo, revision, limits, signal);
  const byPath = new Map<string, { size: number; oid: string; sha256: string | undefined }>();
  for (const e of tree)
    if (e.type === 'file')
      byPath.set(e.path, { size: e.lfs?.size ?? e.size, oid: e.oid, sha256: e.lfs?.oid });
  if (byPath.size === 0)
    throw hubError(
      HubReason.NoFiles,
      operation,
      `${repo} at ${sha} (${revision}) has no files: name a revision that holds the model`,
      {
        field: 'revision',
      },
    );
  let chosen;
  try {
    chosen = selectFiles(
      { prefix: '', ...selection, maxFiles: selection.maxFiles ?? DEFAULT_MAX_FILES },
      [...byPath].map(([key, f]) => ({ key, size: f.size })),
    );
  } catch (e) {
    if (!(e instanceof FileSetError)) throw e;
    const reason = e.field === 'include' ? HubReason.NoFiles : HubReason.TooLarge;
    throw hubError(
      reason,
      operation,
      `${repo} at ${sha}: ${e.message.replace(/under the bucket root /g, '')}`,
      {
        field: e.field,
      },
    );
  }
  return {
    repo,
    ...(current !== repo ? { movedTo: current } : {}),
    revision,
    sha,
    files: chosen.map((f) => {
      const entry = byPath.get(f.path)!;
      return { path: f.path, size: entry.size, sha256: entry.sha256, blobId: entry.oid };
    }),
  };
}
