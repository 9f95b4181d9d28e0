/**
 * A blob checked against its digest: from the hash of its body as it arrived, or by reading the placed file back
 * (a local hit's hard link of the daemon's file, never streamed here).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { OciError, OciReason } from './errors.ts';

/** Reads of 4 MiB, not the stream's 64 KiB: with small reads the per-chunk cost, not hashing, bounds a check. */
const READ_CHUNK = 4 << 20;

export async function sha256File(path: string, signal?: AbortSignal): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path, { highWaterMark: READ_CHUNK }), hash, { signal });
  return `sha256:${hash.digest('hex')}`;
}

/** Throws DigestMismatch naming `layer` when `path` does not hash to `digest`. */
export async function verifyBlob(
  path: string,
  digest: string,
  layer: string,
  signal?: AbortSignal,
): Promise<void> {
  checkDigest(await sha256File(path, signal), digest, layer);
}

/** Throws DigestMismatch naming `layer` when `got` (`sha256:<hex>`) is not `digest`. */
export function checkDigest(got: string, digest: string, layer: string): void {
  if (got !== digest)
    throw new OciError(
      OciReason.DigestMismatch,
      `${layer}: the bytes received hash to ${got}, not to the layer's digest: the registry (or a cache between) served other content; nothing was placed`,
      { layer },
    );
}
