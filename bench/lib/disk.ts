/** The page cache and dirty pages around the data-plane benchmarks' timed cases. */
import { spawnSync } from 'node:child_process';
import { MiB } from './report.ts';

/**
 * Writes back every dirty page of the machine before a timed case. The cases of one repetition write up to 3 GiB
 * each (a cold start through the real network: the seed peer's file, the node peer's file and the archive, all on
 * this one disk): without this, the kernel may flush one case's writes during the next one (past the dirty
 * background threshold it throttles writers), billing that case for its predecessor. It removes that carry-over
 * only: a case's own writes still meet the disk (see the row 6 notes in bench/README.md).
 */
export function settleDisk(): void {
  const r = spawnSync('sync', [], { timeout: 300_000 });
  if (r.status !== 0) throw new Error(`sync failed: ${r.stderr}`);
}

/**
 * Drops `file` from the page cache (POSIX_FADV_DONTNEED through GNU dd's `iflag=nocache`; no root needed, unlike
 * /proc/sys/vm/drop_caches) after writing back its dirty pages, and checks with util-linux `fincore` that it worked.
 */
export function evictFromPageCache(file: string): void {
  const r = spawnSync(
    'bash',
    [
      '-c',
      'sync "$1" && dd if="$1" iflag=nocache count=0 status=none && fincore -bno RES "$1"',
      'evict',
      file,
    ],
    {
      encoding: 'utf8',
      timeout: 120_000,
    },
  );
  const resident = Number(r.stdout.trim());
  if (r.status !== 0 || !Number.isFinite(resident))
    throw new Error(`cannot evict ${file} from the page cache: ${r.stderr}`);
  // A few pages may come back (readahead of a concurrent reader); more means the eviction did not happen.
  if (resident > 16 * MiB)
    throw new Error(`${file} still has ${resident} bytes in the page cache after eviction`);
}

/**
 * Writes back every dirty page and then empties the page cache (root only; false when the kernel refuses). Cases
 * that share one network each leave gigabytes in the page cache (the seed's, the node's and the origin's copies),
 * and reclaiming them is otherwise billed to whichever case runs next: starting every timed case from an empty
 * cache makes a case's position in its repetition not matter.
 */
export function dropPageCache(): boolean {
  settleDisk();
  const r = spawnSync('bash', ['-c', 'echo 3 > /proc/sys/vm/drop_caches'], { timeout: 120_000 });
  return r.status === 0;
}
