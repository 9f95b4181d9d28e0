/**
 * A blob checked against its digest: from the hash of its body as it arrived, or by reading the placed file back
 * (a local hit's hard link of the daemon's file, never streamed here).
 */
import { sha256File } from '../agent/checksum.ts';
import { OciError, OciReason } from './errors.ts';

/** Throws DigestMismatch naming `layer` when `path` does not hash to `digest`. */
export async function verifyBlob(
  path: string,
  digest: string,
  layer: string,
  signal?: AbortSignal,
): Promise<void> {
  checkDigest(`sha256:${await sha256File(path, signal)}`, digest, layer);
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
