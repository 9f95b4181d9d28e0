/**
 * Where a symbolic link in an extracted tree really leads, decided before the link is made. A link's target is read
 * from the link's own directory, one component at a time, following every link it passes through (those this
 * extraction made and those already in the directory) the way the kernel will when a model server opens it: `q/..`
 * is the parent of what `q` points to, not the directory `q` sits in, so a target cannot be judged as text.
 *
 * Hand-written because nothing at hand does this for a tree that does not exist yet: node-tar's Unpack checks entry
 * paths as text and makes link targets as given (and skips a bad entry with a warning rather than refusing the
 * archive), `path.normalize` folds `q/..` away, and `fs.realpath` needs every component on disk and would follow a
 * link out of the directory on the host before we could refuse it.
 */

/** The raw target of the symbolic link at `path` (relative to the root, normalized), or undefined if none. */
export type LinkLookup = (path: string) => string | undefined;

/** As Linux's MAXSYMLINKS: more links in one resolution is a loop (the kernel answers ELOOP). */
export const MAX_LINK_HOPS = 40;

/** As Linux's PATH_MAX less its NUL: the kernel makes no link with a longer target, nor opens a longer path. */
export const MAX_PATH_BYTES = 4095;

/**
 * Components one resolution may step through, across its links: far beyond any model's (a few dozen), and what
 * keeps a hostile archive of many long targets through many links from costing the agent minutes of CPU.
 */
const MAX_STEPS = 1024;

/** Why a target is refused, and the links it followed before it got there, in the order followed. */
export interface LinkProblem {
  problem: string;
  via: string[];
}

/** Whether `target` is written as an absolute path (POSIX, or a drive letter another system would take so). */
export const isAbsoluteTarget = (target: string): boolean =>
  target.startsWith('/') || /^[A-Za-z]:/.test(target);

/** A resolution in progress: where it stands (components, and the same joined), the links followed, steps taken. */
interface Walk {
  at: string[];
  path: string;
  trail: string[];
  steps: number;
}

function walk(w: Walk, target: string, lookup: LinkLookup): LinkProblem | undefined {
  const refuse = (problem: string): LinkProblem => ({ problem, via: [...w.trail] });
  if (target === '') return refuse('is empty');
  if (isAbsoluteTarget(target)) return refuse('is absolute');
  if (target.includes('\0')) return refuse('holds a NUL byte');
  if (Buffer.byteLength(target) > MAX_PATH_BYTES) return refuse(`is longer than ${MAX_PATH_BYTES} bytes`);
  for (const part of target.split('/')) {
    if (++w.steps > MAX_STEPS) return refuse(`takes more than ${MAX_STEPS} steps to resolve`);
    if (part === '' || part === '.') continue;
    if (part === '..') {
      const last = w.at.pop();
      if (last === undefined) return refuse('leaves the directory (..)');
      w.path = w.path.slice(0, Math.max(0, w.path.length - last.length - 1));
      continue;
    }
    const path = w.path === '' ? part : `${w.path}/${part}`;
    const next = lookup(path);
    if (next === undefined) {
      if (path.length > MAX_PATH_BYTES) return refuse(`leads deeper than ${MAX_PATH_BYTES} bytes of path`);
      w.at.push(part);
      w.path = path;
      continue;
    }
    w.trail.push(path);
    if (w.trail.length > MAX_LINK_HOPS)
      return refuse(`passes through more than ${MAX_LINK_HOPS} symbolic links (a loop)`);
    // A link's target is read from the directory the link sits in: where the walk stands, all directories.
    const r = walk(w, next, lookup);
    if (r) return r;
  }
  return undefined;
}

/**
 * The path (relative to the root, normalized; '' is the root itself) that the symbolic link at `link` with target
 * `target` leads to, or why it is refused: empty, absolute, or leaving the root at any step.
 */
export function resolveLink(
  link: string,
  target: string,
  lookup: LinkLookup,
): { path: string } | LinkProblem {
  const at = link.split('/').slice(0, -1);
  const w: Walk = { at, path: at.join('/'), trail: [], steps: 0 };
  return walk(w, target, lookup) ?? { path: w.path };
}

/** A refusal's words: `leaves the directory (..) through the symbolic links a/q, b`. */
export const describeProblem = (p: LinkProblem): string => {
  if (p.via.length === 0) return p.problem;
  // A loop's trail is 40 links long: the first few name it.
  const shown = p.via.length > 4 ? [...p.via.slice(0, 4), '…'] : p.via;
  return `${p.problem} through the symbolic link${p.via.length > 1 ? 's' : ''} ${shown.join(', ')}`;
};
