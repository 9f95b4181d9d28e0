/**
 * A ModelPack artifact placed into a directory by the placer (src/place/placer.ts), for `peerload fetch oci://`:
 * the manifest is read and checked whole first (nothing is fetched before), translated into the placer's files by
 * the OCI source kind's own translation (src/sources/oci.ts artifactFiles, what the operator's agents get), and
 * placed with the `directory` destination (or, for KServe's form, the `mount` one): every blob through the node's
 * peer proxy, digests checked, tar layers extracted safely, the directory renamed into place whole. What this
 * module adds is the registry's terms: a failure is an {@link OciError} (a 404 of a blob is NotFound, other bytes
 * than the digest DigestMismatch) or the placer's own error (an unsafe tar entry), naming the layer; and the report
 * is per manifest layer. It holds no placement loop.
 */
import { dirname } from 'node:path';
import type { Dispatcher } from 'undici';
import type { Logger } from 'pino';
import { PlaceError, PlaceReason } from '../place/errors.ts';
import {
  DEFAULT_LIMITS,
  DEFAULT_MAX_FILES,
  DownloadRefused,
  downloadVersion,
  newProgress,
  preflight,
  type AgentLimits,
  type FileProgress,
  type VersionProgress,
} from '../place/placer.ts';
import { ModelVersionSpecSchema, specProblems, type ModelVersionSpec } from '../place/spec.ts';
import type { RegistryClient } from '../oci/client.ts';
import { OciError, OciReason } from '../oci/errors.ts';
import { parseModelManifest, type ModelManifest } from '../oci/manifest.ts';
import { formatReference, type OciReference } from '../oci/reference.ts';
import { artifactFiles } from '../sources/oci.ts';

export interface PlaceLimits extends AgentLimits {
  /** Files the artifact may hold, tar layers unpacked. */
  maxFiles: number;
  /** The free bytes of the volume holding a path (default: statfs); tests give a reading of their own. */
  freeBytes?: ((path: string) => Promise<number>) | undefined;
}

export const DEFAULT_PLACE_LIMITS: PlaceLimits = { ...DEFAULT_LIMITS, maxFiles: DEFAULT_MAX_FILES };

export interface PlaceRequest {
  client: RegistryClient;
  ref: OciReference;
  /** The directory the artifact becomes (must not exist yet), or with `mount` the mount point it is moved into. */
  dest: string;
  /** `dest` is a mount point (KServe's `/mnt/models`): the placer's `mount` destination, staged then moved up. */
  mount?: boolean | undefined;
  /** `http://host:port` of the node's peer proxy. */
  proxy: string;
  dispatcher: Dispatcher;
  /** `dirname(dest)` (with `mount`, `dest`) as the peer daemon sees it: set, blobs are first asked for as hard
   *  links of its cache. */
  hardLinkRoot?: string | undefined;
  /** The model server's uid: a link stays only where that uid can neither write nor chmod the daemon's file. */
  serverUid?: number | undefined;
  limits: PlaceLimits;
  /** The blobs' task tag (the registry credentials' tag, so a preheat's and the agents' tasks are joined). */
  tag?: string | undefined;
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

/** The placer's file of manifest layer `index` (a second layer of the same tar blob: the first's file). */
function layerFilePath(manifest: ModelManifest, index: number): string {
  const l = manifest.layers[index]!;
  return l.format === 'raw' ? l.filepath! : `sha256-${l.digest.slice('sha256:'.length)}`;
}

/** A blob fetch's failure in the registry's terms: the origin's 401, 403 and 404 as the registry's reasons. */
function fetchReason(fp: FileProgress | undefined): OciReason {
  if (fp?.errorType?.toLowerCase() !== 'backend') return OciReason.DownloadFailed;
  return fp.status === 401
    ? OciReason.Unauthorized
    : fp.status === 403
      ? OciReason.Forbidden
      : fp.status === 404
        ? OciReason.NotFound
        : OciReason.DownloadFailed;
}

/** A failed placement as this module throws it: the placer's reasons in the registry's terms where it has some. */
function failure(spec: ModelVersionSpec, p: VersionProgress): Error {
  const file = spec.files.find((f) => f.path === p.failedFile);
  const fp = p.files.find((f) => f.path === p.failedFile);
  const layer = file?.layer;
  const message = p.error ?? 'failed';
  if (p.reason === PlaceReason.ChecksumMismatch)
    return new OciError(OciReason.DigestMismatch, message, { layer });
  if (p.reason === PlaceReason.DiskBudgetExceeded)
    return new OciError(OciReason.LimitExceeded, message, { layer });
  if (p.reason === PlaceReason.DownloadFailed)
    return new OciError(fetchReason(fp), message, { layer, status: fp?.status });
  return new PlaceError((p.reason ?? PlaceReason.WriteFailed) as PlaceReason, message, { layer });
}

/** The spec of the artifact's files, or an OciError naming what the placer would not take. */
function artifactSpec(req: PlaceRequest, manifest: ModelManifest, authorization: string | undefined) {
  // No ServedModel status here: the translation's status part is not used.
  const { files } = artifactFiles(req.client, req.ref, manifest, authorization, { observedGeneration: 0 });
  const parsed = ModelVersionSpecSchema.safeParse({ version: 'artifact', tag: req.tag, ...files });
  if (!parsed.success)
    throw new OciError(
      OciReason.InvalidLayer,
      `${formatReference(req.ref)} cannot be placed: ${specProblems(parsed.error)}`,
      { secrets: [authorization] },
    );
  return parsed.data;
}

/** Each manifest layer's report, from the placer's progress of its file. */
function layerReports(manifest: ModelManifest, p: VersionProgress): LayerReport[] {
  return manifest.layers.map((l) => {
    const fp = p.files.find((f) => f.path === layerFilePath(manifest, l.index));
    return {
      index: l.index,
      digest: l.digest,
      mediaType: l.mediaType,
      filepath: l.filepath,
      bytes: fp?.bytes ?? 0,
      files: l.format === 'raw' ? 1 : (fp?.extracted ?? 0),
      taskID: fp?.taskID,
      localHit: fp?.localHit,
      hardLink: fp?.hardLink,
      hardLinkFallback: fp?.hardLinkFallback,
    };
  });
}

export async function placeArtifact(req: PlaceRequest): Promise<PlaceResult> {
  const { client, ref, limits } = req;
  const deadline = AbortSignal.timeout(limits.deadlineMs);
  const signal = req.signal ? AbortSignal.any([req.signal, deadline]) : deadline;
  const what = formatReference(ref);
  const manifest = await readModelManifest(client, ref, signal);
  const authorization = await client.pullAuthorization(ref.repository, signal);
  const spec = artifactSpec(req, manifest, authorization);
  const config = {
    // The refetch counts live in the model root, as the agent's do: dest is <root>/<model>/<version> (a mount
    // point keeps them itself).
    root: req.mount ? req.dest : dirname(dirname(req.dest)),
    destination: req.mount
      ? ({ kind: 'mount', path: req.dest } as const)
      : ({ kind: 'directory', path: req.dest } as const),
    proxy: req.proxy,
    dispatcher: req.dispatcher,
    hardLinkRoot: req.hardLinkRoot,
    serverUid: req.serverUid,
    limits,
    freeBytes: limits.freeBytes,
    logger: req.logger?.child({ reference: what, digest: manifest.digest }),
  };
  try {
    if ((await preflight(what, spec, config)) === undefined)
      throw new PlaceError(PlaceReason.WriteFailed, `${req.dest} already exists`);
  } catch (e) {
    if (e instanceof DownloadRefused && e.reason === PlaceReason.DiskBudgetExceeded)
      throw new OciError(OciReason.LimitExceeded, e.message);
    throw e;
  }
  const p = await downloadVersion(what, spec, config, newProgress(what, spec), req.signal);
  if (p.state !== 'Ready') {
    if (req.signal?.aborted) throw req.signal.reason;
    throw failure(spec, p);
  }
  const layers = layerReports(manifest, p);
  return {
    reference: what,
    digest: manifest.digest,
    dest: req.dest,
    layers,
    files: layers.reduce((s, r) => s + r.files, 0),
    bytes: layers.reduce((s, r) => s + r.bytes, 0),
    localHits: layers.filter((r) => r.localHit).length,
    hardLinks: layers.filter((r) => r.hardLink).length,
  };
}
