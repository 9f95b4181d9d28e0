/**
 * What a test reads of a pushed ModelPack artifact and of the registry's counting proxy: the manifest modctl pushed
 * (read straight from the registry, so not counted) and, per blob, the GETs the registry answered after the push.
 */
import { createHash } from 'node:crypto';
import type { CountingProxy } from './counting-proxy.ts';

export const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export interface Layer {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

/** A raw layer's file path in the artifact (model-spec's annotation, or the older `vnd.cnai` one). */
export const layerFilePath = (l: Layer): string | undefined =>
  l.annotations?.['org.cnai.model.filepath'] ?? l.annotations?.['org.cncf.model.filepath'];

/** The manifest of `repository:tag` at `registryURL`, with the digest of its bytes. */
export async function pushedManifest(
  registryURL: string,
  repository: string,
  tag: string,
): Promise<{ digest: string; layers: Layer[] }> {
  const res = await fetch(`${registryURL}/v2/${repository}/manifests/${tag}`, {
    headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
  });
  const body = Buffer.from(await res.arrayBuffer());
  return { digest: sha256(body), layers: (JSON.parse(body.toString('utf8')) as { layers: Layer[] }).layers };
}

export interface BlobReads {
  /** Body bytes of the reads (the back-to-source downloads, in pieces or whole). */
  data: number;
  /** 1-byte range probes, which are not reads. */
  probes: number;
  /** Each GET, for the log. */
  gets: string[];
}

/** Per blob digest, the GETs the registry answered through `proxy` after its first `from` requests (the push). */
export function blobReads(proxy: CountingProxy, from: number): Record<string, BlobReads> {
  const out: Record<string, BlobReads> = {};
  for (const q of proxy.requests.slice(from)) {
    const digest = /\/blobs\/(sha256:[0-9a-f]{64})/.exec(q.url)?.[1];
    if (q.method !== 'GET' || digest === undefined) continue;
    const e = (out[digest] ??= { data: 0, probes: 0, gets: [] });
    if (q.range === 'bytes=0-0') e.probes += 1;
    else e.data += q.bytes;
    e.gets.push(`${q.range ?? '-'} ${q.status} ${q.bytes}`);
  }
  return out;
}
