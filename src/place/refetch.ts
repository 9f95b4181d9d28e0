/**
 * Healing a poisoned P2P task. A file whose bytes do not hash to the sha256 its source publishes came from a task
 * that now holds those bytes on the node's daemon (and on every peer that shared it): the daemon answers a task it
 * holds from its cache without asking the origin again, so asking for the same task id again can never succeed.
 * The agent therefore remembers, per published digest, how many times it was served other bytes, and asks for such
 * a file under a fresh task identity: the tag gets a `peerload-refetch-<n>` component, which is part of the task id
 * (src/storage/taskid.ts), so the daemon has no such task and fetches the origin again. `n` is the same on every
 * node for the same history (the first failure makes it 1 everywhere), so the replicas' retries share one fresh
 * task through the P2P network instead of each reading the origin. A retry served other bytes again (an origin that
 * still serves them) counts once more and the next one uses yet another task.
 *
 * Kept on the model volume, `<root>/.peerload-refetch/<sha256>` holding the count, so an agent restarted (or
 * `peerload fetch` in a restarted init container) does not fall back onto the poisoned task. A dot name: a
 * repository scan passes it by. One small file per digest that was ever served wrongly. A placement reads the folder
 * once ({@link poisonedDigests}) and a count file only for a digest listed there: a version of ten thousand
 * checksummed files costs one readdir, not ten thousand failed opens.
 */
import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { taskTag } from '../storage/credential-tag.ts';

export const REFETCH_DIR = '.peerload-refetch';

/** A published sha256 (64 hex digits, spec.ts checks it) is the file's name: nothing else is accepted. */
const HEX64 = /^[0-9a-f]{64}$/;

/** Highest count kept: past it every retry shares the last task id (an origin that never heals). */
const MAX_ATTEMPT = 1_000;

/** The digests served wrongly here before: one readdir of the folder (empty when there is none). */
export async function poisonedDigests(root: string): Promise<ReadonlySet<string>> {
  const names = await readdir(join(root, REFETCH_DIR)).catch(() => []);
  return new Set(names.filter((n) => HEX64.test(n)));
}

/**
 * How many times a file of `sha256` was served other bytes here (0: never, or the count cannot be read). Given the
 * placement's {@link poisonedDigests}, a digest not among them is 0 without touching the disk.
 */
export async function refetchCount(
  root: string,
  sha256: string,
  poisoned?: ReadonlySet<string>,
): Promise<number> {
  if (!HEX64.test(sha256) || poisoned?.has(sha256) === false) return 0;
  try {
    const n = Number.parseInt(await readFile(join(root, REFETCH_DIR, sha256), 'utf8'), 10);
    return Number.isSafeInteger(n) && n > 0 ? Math.min(n, MAX_ATTEMPT) : 0;
  } catch {
    return 0;
  }
}

/** Counts one more mismatch of `sha256`; the new count. Best effort: a volume that cannot be written keeps 0. */
export async function markPoisoned(root: string, sha256: string): Promise<number> {
  if (!HEX64.test(sha256)) return 0;
  const next = Math.min((await refetchCount(root, sha256)) + 1, MAX_ATTEMPT);
  const dir = join(root, REFETCH_DIR);
  const tmp = join(dir, `${sha256}.${process.pid}.tmp`);
  try {
    await mkdir(dir, { recursive: true });
    await writeFile(tmp, String(next));
    await rename(tmp, join(dir, sha256));
    return next;
  } catch {
    return 0;
  }
}

/** The tag a file's download sends after `count` mismatches: its own tag with the refetch component. */
export function refetchTag(tag: string | undefined, count: number): string | undefined {
  return count > 0 ? taskTag(tag, `peerload-refetch-${count}`) : tag;
}
