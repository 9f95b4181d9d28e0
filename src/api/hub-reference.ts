/**
 * A Hugging Face repository as users name it: `org/name`, with a revision (a branch, a tag or a commit sha), and
 * the `hf://org/name[@revision]` form of `peerload fetch` (KServe's and dfget's spelling). Pure.
 */

/** The Hub's repository id rules: `namespace/name`, letters, digits, `-`, `_`, `.`, no `--` or `..`, at most 96 each. */
const PART = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$/;

export const DEFAULT_REVISION = 'main';

/** A full commit sha: what a revision resolves to. */
export const COMMIT_SHA = /^[0-9a-f]{40}$/;

export interface HubReference {
  repo: string;
  revision: string;
}

/** Why `repo` cannot be a Hub repository id, or undefined. */
export function repoProblem(repo: string): string | undefined {
  const parts = repo.split('/');
  if (parts.length !== 2) return 'must be namespace/name, e.g. meta-llama/Llama-3.1-8B-Instruct';
  for (const p of parts) {
    if (!PART.test(p) || p.includes('--') || p.includes('..'))
      return 'each part must be 1 to 96 letters, digits, - _ . (not starting or ending with - or ., no -- or ..)';
  }
  return undefined;
}

/** Why `revision` cannot name a revision (a branch or tag may hold `/`, e.g. `refs/pr/1`), or undefined. */
export function revisionProblem(revision: string): string | undefined {
  if (revision === '' || revision.length > 256) return 'must be 1 to 256 characters';
  // git's ref name rules that matter for a URL segment: no control characters, spaces or `..`.
  // eslint-disable-next-line no-control-regex -- control characters are what this rule is about
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(revision) || revision.includes('..'))
    return 'must be a branch, tag or commit sha (no spaces, control characters, ~ ^ : ? * [ \\ or ..)';
  return undefined;
}

/** Parses `hf://org/name[@revision]`; throws a message naming what to fix. */
export function parseHubURI(uri: string): HubReference {
  const m = /^hf:\/\/([^@]*)(?:@(.*))?$/.exec(uri);
  if (!m)
    throw new Error(
      `"${uri}" is not a Hub reference: write hf://namespace/name or hf://namespace/name@revision`,
    );
  const repo = m[1]!;
  const revision = m[2] ?? DEFAULT_REVISION;
  const rp = repoProblem(repo);
  if (rp) throw new Error(`hf://${repo}: the repository ${rp}`);
  const vp = revisionProblem(revision);
  if (vp) throw new Error(`hf://${repo}@${revision}: the revision ${vp}`);
  return { repo, revision };
}
