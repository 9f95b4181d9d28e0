/**
 * A ModelPack artifact placed into a directory through the node's peer proxy, all of it or nothing: the manifest
 * is read and checked whole first, then every blob is fetched by its registry URL (`/v2/<repo>/blobs/sha256:…`, the
 * URL an image preheat makes tasks of) through the proxy with the agent's own file fetch (src/agent/proxy-fetch.ts:
 * a hard link of the daemon's copy where allowed), each checked against its digest (the body hashed as it arrives,
 * or a local hit's linked file read back); raw layers land on their
 * annotated path, tar layers are extracted safely after every blob is in (extract.ts); only then is the temporary
 * directory renamed into place. Any failure removes what was made and throws an {@link OciError} naming the layer.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat, statfs } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import { TEMP_PREFIX } from '../agent/download.ts';
import { FetchError, fetchFile, fetchLogFields } from '../agent/proxy-fetch.ts';
import { markPoisoned, refetchCount, refetchTag } from '../agent/refetch.ts';
import { TAG_HEADER } from '../storage/taskid.ts';
import type { RegistryClient } from './client.ts';
import { OciError, OciReason } from './errors.ts';
import { extractLayer, newExtractState, type ExtractLimits } from './extract.ts';
import { parseModelManifest, type ModelLayer, type ModelManifest } from './manifest.ts';
import { formatReference, type OciReference } from './reference.ts';
import { checkDigest, verifyBlob } from './verify.ts';

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
  /** The model server's uid: a link stays only where that uid can neither write nor chmod the daemon's file. */
  serverUid?: number | undefined;
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

/** One placement as it runs: what fetching and extracting share. */
interface Run {
  req: PlaceRequest;
  manifest: ModelManifest;
  what: string;
  /** The temporary directory that becomes `dest`. */
  tmp: string;
  /** Where tar blobs wait for their extraction (beside `tmp`, so no archive entry can collide with them). */
  blobs: string;
  headers: Record<string, string>;
  reports: LayerReport[];
  /** Layers of distinct blobs: a tar blob listed twice is fetched once. */
  distinct: ModelLayer[];
  received: number;
  signal: AbortSignal;
  log: Logger | undefined;
}

/** The caps that can be checked from the manifest: bytes, and free space for them. */
async function checkSpace(
  manifest: ModelManifest,
  limits: PlaceLimits,
  parent: string,
  what: string,
): Promise<void> {
  if (manifest.bytes > limits.maxBytes)
    throw new OciError(
      OciReason.LimitExceeded,
      `${what} holds ${manifest.bytes} bytes of layers, above the cap of ${limits.maxBytes} bytes: raise the byte cap or make the model smaller`,
    );
  const fs = limits.freeBytes ? undefined : await statfs(parent);
  // A hard link takes no blocks, but a refused one is streamed, and a tar layer is the blob plus what it unpacks.
  const needed =
    manifest.bytes + manifest.layers.filter((l) => l.format !== 'raw').reduce((s, l) => s + l.size, 0);
  const free = fs ? fs.bavail * fs.bsize : await limits.freeBytes!(parent);
  if (free - needed < limits.minFreeBytes)
    throw new OciError(
      OciReason.LimitExceeded,
      `${what} needs up to ${needed} bytes; ${free} are free and ${limits.minFreeBytes} must stay free: free space on the volume`,
    );
}

const blobPath = (run: Run, l: ModelLayer) =>
  l.format === 'raw' ? join(run.tmp, l.filepath!) : join(run.blobs, l.digest.slice(7));

/** One blob through the peer proxy onto its path, then checked against its digest. */
async function fetchLayer(run: Run, l: ModelLayer): Promise<void> {
  const { req } = run;
  const local = l.format === 'raw' ? run.tmp : run.blobs;
  const target = blobPath(run, l);
  const asked = performance.now();
  // A digest served wrongly before is asked for under a fresh task, as the agent does (src/agent/refetch.ts); the
  // counts live beside the model's directory (the model root when dest is <root>/<model>/<version>).
  const counts = dirname(dirname(req.dest));
  const hex = l.digest.slice('sha256:'.length);
  const tag = refetchTag(run.headers[TAG_HEADER], await refetchCount(counts, hex));
  let r;
  try {
    r = await fetchFile({
      dispatcher: req.dispatcher,
      proxy: req.proxy,
      url: req.client.blobURL(req.ref.repository, l.digest),
      headers: tag ? { ...run.headers, [TAG_HEADER]: tag } : run.headers,
      target,
      expectedSize: l.size,
      hardLink:
        req.hardLinkRoot !== undefined
          ? { local, daemon: join(req.hardLinkRoot, basename(local)), serverUid: req.serverUid }
          : undefined,
      signal: run.signal,
      what: l.name,
      sha256: true,
      onRetry: (why, attempt) =>
        run.log?.warn({ layer: l.index, attempt, why }, 'the peer daemon cut the download; asking again'),
      onBytes: (n) => {
        run.received += n;
        if (run.received > req.limits.maxBytes)
          throw new OciError(
            OciReason.LimitExceeded,
            `${l.name} takes ${run.what} past the cap of ${req.limits.maxBytes} bytes`,
            {
              layer: l.name,
            },
          );
      },
    });
  } catch (e) {
    if (e instanceof FetchError) throw fetchFailure(e, l);
    const code = (e as { code?: string }).code;
    if (code === 'EEXIST' || code === 'ENOTDIR')
      throw new OciError(OciReason.InvalidLayer, `${l.name}: its path collides with another layer's file`, {
        layer: l.name,
      });
    throw e;
  }
  const fetched = performance.now();
  // A body that came through here was hashed as it arrived; only a local hit's link (never read) is read back.
  try {
    if (r.sha256 !== undefined) checkDigest(r.sha256, l.digest, l.name);
    else await verifyBlob(target, l.digest, l.name, run.signal);
  } catch (e) {
    if (e instanceof OciError && e.reason === OciReason.DigestMismatch) await markPoisoned(counts, hex);
    throw e;
  }
  Object.assign(run.reports[l.index]!, {
    bytes: r.bytes,
    files: l.format === 'raw' ? 1 : 0,
    taskID: r.taskID,
    localHit: r.localHit,
    hardLink: r.hardLink,
    hardLinkFallback: r.hardLinkFallback,
  });
  run.log?.debug({ layer: l.index, ...fetchLogFields(r, asked, fetched) }, 'blob verified');
}

/** Every distinct blob, `concurrency` at a time; the first failure stops the rest and is thrown. */
async function fetchBlobs(run: Run): Promise<void> {
  let next = 0;
  let failed: unknown;
  const worker = async () => {
    while (failed === undefined && next < run.distinct.length) {
      const l = run.distinct[next++]!;
      try {
        await fetchLayer(run, l);
      } catch (e) {
        failed ??= e;
      }
    }
  };
  await Promise.all(
    Array.from({ length: Math.min(run.req.limits.concurrency, run.distinct.length) }, () => worker()),
  );
  if (failed !== undefined) throw failed;
}

/** The tar layers, in manifest order, over the raw files (whose paths an archive may not take). */
async function extractArchives(run: Run): Promise<void> {
  const layers = run.manifest.layers;
  const raw = layers.filter((l) => l.format === 'raw');
  const state = newExtractState();
  for (const l of raw) state.regular.add(l.filepath!);
  state.files = raw.length;
  state.bytes = raw.reduce((s, l) => s + l.size, 0);
  for (const l of layers) {
    if (l.format === 'raw') continue;
    const r = await extractLayer(blobPath(run, l), l.format, run.tmp, l.name, run.req.limits, state);
    const report = run.reports[l.index]!;
    const first = run.distinct.find((d) => d.digest === l.digest)!;
    // A second layer of the same blob reports the fetch of the first.
    if (first.index !== l.index) Object.assign(report, { ...run.reports[first.index]!, index: l.index });
    report.files = r.files;
  }
}

function summary(run: Run): PlaceResult {
  const { reports } = run;
  return {
    reference: run.what,
    digest: run.manifest.digest,
    dest: run.req.dest,
    layers: reports,
    files: reports.reduce((s, r) => s + r.files, 0),
    bytes: reports.reduce((s, r) => s + r.bytes, 0),
    localHits: reports.filter((r) => r.localHit).length,
    hardLinks: reports.filter((r) => r.hardLink).length,
  };
}

export async function placeArtifact(req: PlaceRequest): Promise<PlaceResult> {
  const { client, ref, limits } = req;
  const deadline = AbortSignal.timeout(limits.deadlineMs);
  const signal = req.signal ? AbortSignal.any([req.signal, deadline]) : deadline;
  const what = formatReference(ref);
  const started = performance.now();
  const manifest = await readModelManifest(client, ref, signal);
  const parent = dirname(req.dest);
  await mkdir(parent, { recursive: true });
  await checkSpace(manifest, limits, parent, what);
  const authorization = await client.pullAuthorization(ref.repository, signal);
  const nonce = `${TEMP_PREFIX}${basename(req.dest)}-${randomBytes(4).toString('hex')}`;
  const run: Run = {
    req,
    manifest,
    what,
    tmp: join(parent, nonce),
    blobs: join(parent, `${nonce}.blobs`),
    headers: { ...(req.headers ?? {}), ...(authorization ? { authorization } : {}) },
    reports: manifest.layers.map((l) => ({
      index: l.index,
      digest: l.digest,
      mediaType: l.mediaType,
      filepath: l.filepath,
      bytes: 0,
      files: 0,
    })),
    distinct: manifest.layers.filter(
      (l, i) =>
        l.format === 'raw' ||
        manifest.layers.findIndex((o) => o.format !== 'raw' && o.digest === l.digest) === i,
    ),
    received: 0,
    signal,
    log: req.logger?.child({ reference: what, digest: manifest.digest }),
  };
  run.log?.debug(
    { layers: manifest.layers.length, ms: Math.round(performance.now() - started) },
    'manifest read and checked; fetching the blobs',
  );
  try {
    await mkdir(run.tmp);
    await mkdir(run.blobs);
    await fetchBlobs(run);
    await extractArchives(run);
    if (
      await stat(req.dest).then(
        () => true,
        () => false,
      )
    )
      throw new OciError(OciReason.InvalidLayer, `${req.dest} appeared while placing ${what}`);
    await rename(run.tmp, req.dest);
  } catch (e) {
    await rm(run.tmp, { recursive: true, force: true }).catch(() => undefined);
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
    await rm(run.blobs, { recursive: true, force: true }).catch(() => undefined);
  }
  const result = summary(run);
  const { files, bytes, localHits, hardLinks } = result;
  run.log?.info({ layers: result.layers.length, files, bytes, localHits, hardLinks }, 'artifact placed');
  return result;
}
