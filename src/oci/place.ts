/**
 * A ModelPack artifact placed into a directory through the node's peer proxy, all of it or nothing: the manifest
 * is read and checked whole first, then every blob is fetched by its registry URL (`/v2/<repo>/blobs/sha256:…`, the
 * URL an image preheat makes tasks of) through the proxy with the agent's own file fetch (src/agent/proxy-fetch.ts:
 * a hard link of the daemon's copy where allowed), each checked against its digest; raw layers land on their
 * annotated path, tar layers are extracted safely after every blob is in (extract.ts); only then is the temporary
 * directory renamed into place. Any failure removes what was made and throws an {@link OciError} naming the layer.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat, statfs } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import { TEMP_PREFIX } from '../agent/download.ts';
import { FetchError, fetchFile } from '../agent/proxy-fetch.ts';
import type { RegistryClient } from './client.ts';
import { OciError, OciReason } from './errors.ts';
import { extractLayer, newExtractState, type ExtractLimits } from './extract.ts';
import { parseModelManifest, type ModelLayer, type ModelManifest } from './manifest.ts';
import { formatReference, type OciReference } from './reference.ts';
import { verifyBlob } from './verify.ts';

export interface PlaceLimits extends ExtractLimits {
  /** Free bytes the file system must keep after the placement. */
  minFreeBytes: number;
  /** Blobs fetched at once. */
  concurrency: number;
  /** The whole placement, ms. */
  deadlineMs: number;
}

export const DEFAULT_PLACE_LIMITS: PlaceLimits = {
  maxBytes: 1024 ** 4,
  maxFiles: 100_000,
  minFreeBytes: 1024 ** 3,
  concurrency: 4,
  deadlineMs: 3_600_000,
};

export interface PlaceRequest {
  client: RegistryClient;
  ref: OciReference;
  /** The directory the artifact becomes (must not exist yet). */
  dest: string;
  /** `http://host:port` of the node's peer proxy. */
  proxy: string;
  dispatcher: Dispatcher;
  /** `dirname(dest)` as the peer daemon sees it: set, blobs are first asked for as hard links of its cache. */
  hardLinkRoot?: string | undefined;
  limits: PlaceLimits;
  /** Extra headers for the proxy (a preheat's tag or application, so its tasks are joined). */
  headers?: Record<string, string> | undefined;
  signal?: AbortSignal | undefined;
  logger?: Logger | undefined;
}

export interface LayerReport {
  index: number;
  digest: string;
  mediaType: string;
  filepath?: string | undefined;
  /** Blob bytes received (or linked). */
  bytes: number;
  /** Files the layer made (1 for raw). */
  files: number;
  taskID?: string | undefined;
  localHit?: boolean | undefined;
  hardLink?: boolean | undefined;
  hardLinkFallback?: string | undefined;
}

export interface PlaceResult {
  reference: string;
  /** The manifest's digest: what a tag resolved to. */
  digest: string;
  dest: string;
  layers: LayerReport[];
  files: number;
  bytes: number;
  localHits: number;
  hardLinks: number;
}

/** The manifest of `ref`, read and checked (nothing downloaded yet). */
export async function readModelManifest(
  client: RegistryClient,
  ref: OciReference,
  signal?: AbortSignal,
): Promise<ModelManifest> {
  const m = await client.manifest(ref, signal);
  return parseModelManifest(m.body, m.digest, m.contentType, formatReference(ref));
}

/** A blob fetch's failure in the registry's terms, naming the layer. */
function fetchFailure(e: FetchError, layer: ModelLayer): OciError {
  const backend = e.errorType?.toLowerCase() === 'backend';
  const reason =
    backend && e.status === 401
      ? OciReason.Unauthorized
      : backend && e.status === 403
        ? OciReason.Forbidden
        : backend && e.status === 404
          ? OciReason.NotFound
          : OciReason.DownloadFailed;
  return new OciError(reason, `${layer.name}: ${e.message}`, {
    layer: layer.name,
    status: e.status || undefined,
  });
}

export async function placeArtifact(req: PlaceRequest): Promise<PlaceResult> {
  const { client, ref, limits } = req;
  const deadline = AbortSignal.timeout(limits.deadlineMs);
  const signal = req.signal ? AbortSignal.any([req.signal, deadline]) : deadline;
  const what = formatReference(ref);
  const manifest = await readModelManifest(client, ref, signal);
  if (manifest.bytes > limits.maxBytes)
    throw new OciError(
      OciReason.LimitExceeded,
      `${what} holds ${manifest.bytes} bytes of layers, above the cap of ${limits.maxBytes} bytes: raise the byte cap or make the model smaller`,
    );
  const parent = dirname(req.dest);
  await mkdir(parent, { recursive: true });
  const fs = await statfs(parent);
  // A hard link takes no blocks, but a refused one is streamed, and a tar layer is the blob plus what it unpacks.
  const needed =
    manifest.bytes + manifest.layers.filter((l) => l.format !== 'raw').reduce((s, l) => s + l.size, 0);
  if (fs.bavail * fs.bsize - needed < limits.minFreeBytes)
    throw new OciError(
      OciReason.LimitExceeded,
      `${what} needs up to ${needed} bytes; ${fs.bavail * fs.bsize} are free and ${limits.minFreeBytes} must stay free: free space on the volume`,
    );
  const authorization = await client.pullAuthorization(ref.repository, signal);
  const headers: Record<string, string> = {
    ...(req.headers ?? {}),
    ...(authorization ? { authorization } : {}),
  };
  const nonce = randomBytes(4).toString('hex');
  const tmp = join(parent, `${TEMP_PREFIX}${basename(req.dest)}-${nonce}`);
  const blobs = join(parent, `${TEMP_PREFIX}${basename(req.dest)}-${nonce}.blobs`);
  const log = req.logger?.child({ reference: what, digest: manifest.digest });
  const reports: LayerReport[] = manifest.layers.map((l) => ({
    index: l.index,
    digest: l.digest,
    mediaType: l.mediaType,
    filepath: l.filepath,
    bytes: 0,
    files: 0,
  }));
  let received = 0;
  try {
    await mkdir(tmp);
    await mkdir(blobs);
    const blobPath = (l: ModelLayer) =>
      l.format === 'raw' ? join(tmp, l.filepath!) : join(blobs, l.digest.slice(7));

    const fetchLayer = async (l: ModelLayer) => {
      const local = l.format === 'raw' ? tmp : blobs;
      const target = blobPath(l);
      let r;
      try {
        r = await fetchFile({
          dispatcher: req.dispatcher,
          proxy: req.proxy,
          url: client.blobURL(ref.repository, l.digest),
          headers,
          target,
          expectedSize: l.size,
          hardLink:
            req.hardLinkRoot !== undefined
              ? { local, daemon: join(req.hardLinkRoot, basename(local)) }
              : undefined,
          signal,
          what: l.name,
          onBytes: (n) => {
            received += n;
            if (received > limits.maxBytes)
              throw new OciError(
                OciReason.LimitExceeded,
                `${l.name} takes ${what} past the cap of ${limits.maxBytes} bytes`,
                {
                  layer: l.name,
                },
              );
          },
        });
      } catch (e) {
        if (e instanceof FetchError) throw fetchFailure(e, l);
        if ((e as { code?: string }).code === 'EEXIST' || (e as { code?: string }).code === 'ENOTDIR')
          throw new OciError(
            OciReason.InvalidLayer,
            `${l.name}: its path collides with another layer's file`,
            { layer: l.name },
          );
        throw e;
      }
      await verifyBlob(target, l.digest, l.name, signal);
      Object.assign(reports[l.index]!, {
        bytes: r.bytes,
        files: l.format === 'raw' ? 1 : 0,
        taskID: r.taskID,
        localHit: r.localHit,
        hardLink: r.hardLink,
        hardLinkFallback: r.hardLinkFallback,
      });
      log?.debug(
        { layer: l.index, bytes: r.bytes, localHit: r.localHit, hardLink: r.hardLink },
        'blob verified',
      );
    };

    // Tar blobs are shared by digest: two layers of one digest are fetched once.
    const distinct = manifest.layers.filter(
      (l, i) =>
        l.format === 'raw' ||
        manifest.layers.findIndex((o) => o.format !== 'raw' && o.digest === l.digest) === i,
    );
    let next = 0;
    let failed: unknown;
    const worker = async () => {
      while (failed === undefined && next < distinct.length) {
        const l = distinct[next++]!;
        try {
          await fetchLayer(l);
        } catch (e) {
          failed ??= e;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(limits.concurrency, distinct.length) }, () => worker()));
    if (failed !== undefined) throw failed;

    // Every blob is in and verified: now the archives, in manifest order, over the raw files.
    const state = newExtractState();
    for (const l of manifest.layers) if (l.format === 'raw') state.regular.add(l.filepath!);
    state.files = manifest.layers.filter((l) => l.format === 'raw').length;
    state.bytes = manifest.layers.filter((l) => l.format === 'raw').reduce((s, l) => s + l.size, 0);
    for (const l of manifest.layers) {
      if (l.format === 'raw') continue;
      const r = await extractLayer(blobPath(l), l.format, tmp, l.name, limits, state);
      const report = reports[l.index]!;
      const first = distinct.find((d) => d.digest === l.digest)!;
      // A second layer of the same blob reports the fetch of the first.
      if (first.index !== l.index) Object.assign(report, { ...reports[first.index]!, index: l.index });
      report.files = r.files;
    }
    if (
      await stat(req.dest).then(
        () => true,
        () => false,
      )
    )
      throw new OciError(OciReason.InvalidLayer, `${req.dest} appeared while placing ${what}`);
    await rename(tmp, req.dest);
  } catch (e) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    if (signal.aborted && !(e instanceof OciError)) {
      if (deadline.aborted)
        throw new OciError(
          OciReason.DownloadFailed,
          `${what} was not placed within ${limits.deadlineMs / 1000} s`,
        );
      throw req.signal?.reason ?? e;
    }
    throw e;
  } finally {
    await rm(blobs, { recursive: true, force: true }).catch(() => undefined);
  }
  const files = reports.reduce((s, r) => s + r.files, 0);
  const result: PlaceResult = {
    reference: what,
    digest: manifest.digest,
    dest: req.dest,
    layers: reports,
    files,
    bytes: reports.reduce((s, r) => s + r.bytes, 0),
    localHits: reports.filter((r) => r.localHit).length,
    hardLinks: reports.filter((r) => r.hardLink).length,
  };
  log?.info(
    {
      layers: reports.length,
      files,
      bytes: result.bytes,
      localHits: result.localHits,
      hardLinks: result.hardLinks,
    },
    'artifact placed',
  );
  return result;
}
