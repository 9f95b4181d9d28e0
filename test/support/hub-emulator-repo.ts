/**
 * The Hub emulator's repositories as git sees them: commits with their sha, each file's git blob id (of the LFS
 * pointer for an LFS file, as on the Hub), the LFS sha256 and pointer size, and the tree and sibling entries the
 * Hub's API answers with. Pure: no server here (hub-emulator.ts serves it).
 */
import { createHash } from 'node:crypto';

/** A file as a test gives it: its bytes, and whether the Hub stores it in LFS. */
export interface HubFileInput {
  content: Buffer | string;
  lfs?: boolean;
}

export interface HubRepoInput {
  /** `org/name`. */
  id: string;
  /** Commits, oldest first; each the whole tree at that commit. */
  commits: Record<string, HubFileInput | Buffer | string>[];
  /** Branches and tags to the commit index they point at; default `{ main: last }`. */
  refs?: Record<string, number>;
  /** Answers 401 RepoNotFound without a token that is granted it (404 with another valid token). */
  private?: boolean;
  /** Listing works without a token; the files answer 401 GatedRepo without one, 403 with one not granted. */
  gated?: boolean;
}

export interface HubFile {
  path: string;
  content: Buffer;
  lfs: boolean;
  /** Git blob id: of the content, or of the LFS pointer for an LFS file. */
  blobId: string;
  sha256: string;
  pointerSize: number;
}

export interface HubCommit {
  sha: string;
  files: Map<string, HubFile>;
}

export interface HubRepo {
  id: string;
  private: boolean;
  gated: boolean;
  commits: HubCommit[];
  refs: Map<string, number>;
}

const sha1 = (b: Buffer | string) => createHash('sha1').update(b).digest('hex');
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** Git's object id of a blob: sha1 of `blob <size>\0<content>`. */
export function gitBlobId(content: Buffer): string {
  return sha1(Buffer.concat([Buffer.from(`blob ${content.length}\0`), content]));
}

/** The LFS pointer file git stores for an LFS object. */
export function lfsPointer(content: Buffer): Buffer {
  return Buffer.from(
    `version https://git-lfs.github.com/spec/v1\noid sha256:${sha256(content)}\nsize ${content.length}\n`,
  );
}

function hubFile(path: string, input: HubFileInput | Buffer | string): HubFile {
  const given = typeof input === 'string' || Buffer.isBuffer(input) ? { content: input } : input;
  const content = Buffer.from(given.content);
  const lfs = given.lfs ?? false;
  const pointer = lfsPointer(content);
  return {
    path,
    content,
    lfs,
    blobId: gitBlobId(lfs ? pointer : content),
    sha256: sha256(content),
    pointerSize: pointer.length,
  };
}

export function buildRepo(input: HubRepoInput): HubRepo {
  const commits = input.commits.map((tree, i) => {
    const files = new Map(Object.entries(tree).map(([p, f]) => [p, hubFile(p, f)]));
    const listing = [...files.values()].map((f) => `${f.path}:${f.blobId}`).join('\n');
    return { sha: sha1(`${input.id}\n${i}\n${listing}`), files };
  });
  const refs = new Map(Object.entries(input.refs ?? { main: commits.length - 1 }));
  return { id: input.id, private: input.private ?? false, gated: input.gated ?? false, commits, refs };
}

/** The commit a revision names: a branch or tag, or a full 40-hex commit sha of the repo. */
export function commitOf(repo: HubRepo, revision: string): HubCommit | undefined {
  const ref = repo.refs.get(revision);
  if (ref !== undefined) return repo.commits[ref];
  return /^[0-9a-f]{40}$/.test(revision) ? repo.commits.find((c) => c.sha === revision) : undefined;
}

/** `siblings[]` of the model info; sizes, blob ids and LFS only with `?blobs=true`, as on the Hub. */
export function siblings(commit: HubCommit, blobs: boolean) {
  return [...commit.files.values()].map((f) =>
    blobs
      ? {
          rfilename: f.path,
          size: f.content.length,
          blobId: f.blobId,
          ...(f.lfs ? { lfs: { size: f.content.length, sha256: f.sha256, pointerSize: f.pointerSize } } : {}),
        }
      : { rfilename: f.path },
  );
}

/** Entries of the tree API under `dir` (`''`: the root): files and directories, recursively or one level. */
export function treeEntries(commit: HubCommit, dir: string, recursive: boolean) {
  const prefix = dir === '' ? '' : `${dir}/`;
  const dirs = new Set<string>();
  const files: object[] = [];
  for (const f of commit.files.values()) {
    if (!f.path.startsWith(prefix)) continue;
    const rest = f.path.slice(prefix.length).split('/');
    // Every directory between `dir` and the file (only the first level when not recursive).
    for (let i = 1; i < rest.length && (recursive || i === 1); i++)
      dirs.add(prefix + rest.slice(0, i).join('/'));
    if (!recursive && rest.length > 1) continue;
    files.push({
      type: 'file',
      oid: f.blobId,
      size: f.content.length,
      path: f.path,
      ...(f.lfs ? { lfs: { oid: f.sha256, size: f.content.length, pointerSize: f.pointerSize } } : {}),
    });
  }
  const directories = [...dirs].map((d) => ({ type: 'directory', oid: sha1(`tree ${d}`), size: 0, path: d }));
  return [...directories, ...files].sort((a, b) =>
    (a as { path: string }).path < (b as { path: string }).path ? -1 : 1,
  );
}
