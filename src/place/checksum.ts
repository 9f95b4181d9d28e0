/**
 * A downloaded file against the digest its source publishes (a Hub LFS object's sha256, an OCI layer's digest).
 * A body that came through the agent is hashed as it arrives (proxy-fetch.ts); only a file whose body was never
 * read (a local hit's hard link of the daemon's copy) is read back from the disk, by {@link sha256File}.
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { PlaceError, PlaceReason } from './errors.ts';

export class ChecksumMismatch extends PlaceError {
  constructor(what: string, expected: string, actual: string) {
    super(
      PlaceReason.ChecksumMismatch,
      `${what}: its bytes hash to sha256 ${actual}, not the ${expected} its source publishes`,
      { layer: what },
    );
    this.name = 'ChecksumMismatch';
  }
}

/**
 * Reads of 1 MiB into one buffer: a read stream's 64 KiB chunks make the per-chunk cost, not hashing, bound the
 * check, and a new buffer per read leaves gigabytes of garbage behind a multi-GiB file.
 */
const READ_CHUNK = 1 << 20;

/** The sha256 of the file at `path`, lowercase hex. */
export async function sha256File(path: string, signal?: AbortSignal): Promise<string> {
  const hash = createHash('sha256');
  const file = await open(path, 'r');
  try {
    const chunk = Buffer.allocUnsafe(READ_CHUNK);
    for (;;) {
      signal?.throwIfAborted();
      const { bytesRead } = await file.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      hash.update(chunk.subarray(0, bytesRead));
    }
  } finally {
    await file.close();
  }
  return hash.digest('hex');
}

/** Throws {@link ChecksumMismatch} when `actual` (hex) is not `expected` (hex). */
export function checkSha256(actual: string, expected: string, what: string): void {
  if (actual !== expected) throw new ChecksumMismatch(what, expected, actual);
}
