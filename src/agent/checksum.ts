/**
 * A downloaded file against the digest its source publishes (a Hub LFS object's sha256): read back from the disk
 * once complete, so a hard link of the daemon's copy is checked exactly like a streamed file.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';

export class ChecksumMismatch extends Error {
  constructor(what: string, expected: string, actual: string) {
    super(`${what}: its bytes hash to sha256 ${actual}, not the ${expected} its source publishes`);
    this.name = 'ChecksumMismatch';
  }
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** Throws {@link ChecksumMismatch} when the file at `path` does not hash to `expected`. */
export async function checkSha256(path: string, expected: string, what: string): Promise<void> {
  const actual = await sha256File(path);
  if (actual !== expected) throw new ChecksumMismatch(what, expected, actual);
}
