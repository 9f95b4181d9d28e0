/**
 * A repository's files at one commit, as a model directory: the revision resolved to its sha, the tree listed at
 * that sha (nested paths, sizes, LFS sha256), include/exclude and the maxFiles/maxBytes caps applied by the same
 * rules as an object-storage directory (src/storage/fileset.ts). The whole resolution (listing and LFS HEADs) is
 * bounded by the client's budget (src/http/budget.ts): one deadline, the entries held and their text, the bytes.
 */
import { DEFAULT_MAX_FILES } from '../api/fileset.ts';
import { FileSetError, selectFiles, type FileSetSpec } from '../storage/fileset.ts';
import type { HubClient } from './client.ts';
import { HubReason, hubError } from './errors.ts';

/** What chooses and bounds the files, as for an object-storage directory. */
export type HubSelection = Pick<FileSetSpec, 'include' | 'exclude' | 'maxFiles' | 'maxBytes'>;

/** The bounds of a Hub resolution an operator or a CLI sets (the rest are the budget's defaults). */
export interface HubListingLimits {
  /** The whole resolution (revision, every page, the LFS HEADs), ms. */
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

/** Lists `repo` at `revision`; throws {@link HubError} naming the field to change. */
export async function listRepoFiles(
  client: HubClient,
  repo: string,
  revision: string,
  selection: HubSelection = {},
  signal?: AbortSignal,
): Promise<HubListing> {
  const operation = `list ${repo}@${revision}`;
  // A renamed repository: the Hub redirected the revision's call, and the rest goes to the name it has now.
  const { sha, repo: current } = await client.revisionOf(repo, revision, signal);
  const tree = await client.listTree(current, sha, { signal });
  const first = tree.find((e) => e.type === 'file');
  if (first) await client.fileLocation(current, sha, first.path, signal);
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
