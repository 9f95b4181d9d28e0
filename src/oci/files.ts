/**
 * A ModelPack manifest as the placer's files (src/place/spec.ts): what the operator sends the agents for
 * `spec.source.oci` and what `peerload fetch oci://` places, the same translation for both. Each distinct blob once,
 * by its registry URL (the URL an image preheat makes tasks of) with its digest as the sha256 to check; a raw layer
 * on its annotated path, a tar layer as an archive to extract. The registry's Authorization travels once, in the
 * spec's `registry` header set that every file names. Pure: no request is made here.
 */
import type { ModelVersionSpec } from '../place/spec.ts';
import type { ModelManifest } from './manifest.ts';

/** The spec's header set of the registry's Authorization (src/place/spec.ts headerSets). */
export const REGISTRY_HEADER_SET = 'registry';

/** The part of a version spec an artifact gives: its files, the header set they name, the byte bound. */
export type ArtifactFiles = Pick<ModelVersionSpec, 'files' | 'headerSets' | 'maxBytes'>;

/**
 * The files of `manifest`: `blobURL` makes a blob's URL from its digest, `authorization` (when the registry needs
 * one) is sent once as the {@link REGISTRY_HEADER_SET} set, and `maxBytes` bounds what the version may take, tar
 * layers unpacked included (only the placer sees what they unpack to).
 */
export function artifactFiles(
  manifest: ModelManifest,
  blobURL: (digest: string) => string,
  authorization: string | undefined,
  maxBytes?: number,
): ArtifactFiles {
  const headers = authorization !== undefined ? { headerSet: REGISTRY_HEADER_SET } : {};
  const seen = new Set<string>();
  const files: ModelVersionSpec['files'] = [];
  for (const l of manifest.layers) {
    const url = blobURL(l.digest);
    const hex = l.digest.slice('sha256:'.length);
    if (l.format === 'raw') {
      files.push({ path: l.filepath!, url, size: l.size, sha256: hex, layer: l.name, ...headers });
      continue;
    }
    // A tar blob listed twice is extracted once: a second extraction would collide with the first's files.
    if (seen.has(l.digest)) continue;
    seen.add(l.digest);
    files.push({
      path: `sha256-${hex}`,
      url,
      size: l.size,
      sha256: hex,
      layer: l.name,
      extract: l.format,
      ...headers,
    });
  }
  return {
    files,
    ...(maxBytes !== undefined ? { maxBytes } : {}),
    ...(authorization !== undefined ? { headerSets: { [REGISTRY_HEADER_SET]: { authorization } } } : {}),
  };
}

/** The placer's file of manifest layer `index` (a second layer of the same tar blob: the first's file). */
export function layerFilePath(manifest: ModelManifest, index: number): string {
  const l = manifest.layers[index]!;
  return l.format === 'raw' ? l.filepath! : `sha256-${l.digest.slice('sha256:'.length)}`;
}
