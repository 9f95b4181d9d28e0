/**
 * A ModelPack model manifest: an OCI image manifest whose `artifactType` (or, failing that, whose config's media
 * type) says model, and whose layers are model layers, each naming its file. Parsed from the bytes the registry
 * sent (their digest is the manifest's identity) and checked completely before anything is downloaded, so a bad
 * manifest places nothing.
 */
import { z } from 'zod';
import { pathProblem } from '../storage/fileset.ts';
import { OciError, OciReason } from './errors.ts';
import {
  DOCKER_LIST,
  DOCKER_MANIFEST,
  FILEPATH_ANNOTATION,
  LEGACY_FILEPATH_ANNOTATION,
  MODEL_ARTIFACT_TYPE,
  OCI_INDEX,
  OCI_MANIFEST,
  isModelArtifactType,
  isModelConfig,
  layerType,
  type LayerFormat,
  type LayerKind,
} from './media-types.ts';
import { DIGEST } from './reference.ts';

const DescriptorSchema = z.object({
  mediaType: z.string().min(1).max(255),
  digest: z.string().regex(DIGEST, 'must be sha256:<64 hex digits>'),
  size: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  annotations: z.record(z.string(), z.string()).optional(),
});

/** The fields of an OCI image manifest peerload reads; others are allowed and ignored (the spec says so). */
type ManifestLayer = z.infer<typeof DescriptorSchema>;

const ManifestSchema = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  artifactType: z.string().optional(),
  config: DescriptorSchema,
  layers: z.array(DescriptorSchema).max(10_000),
  annotations: z.record(z.string(), z.string()).optional(),
});

export interface ModelLayer {
  /** Position in the manifest. */
  index: number;
  digest: string;
  size: number;
  mediaType: string;
  kind: LayerKind;
  format: LayerFormat;
  /** A `vnd.cnai.model.*` type (modctl's default). */
  legacy: boolean;
  /** The annotated file path: the file itself for `raw`, what the archive holds for a tar. */
  filepath: string | undefined;
  /** How messages name it: `layer 2 (sha256:ab12cd34ef56, weights/model.bin)`. */
  name: string;
}

export interface ModelManifest {
  /** The manifest's own digest (of the bytes received). */
  digest: string;
  artifactType: string;
  config: { mediaType: string; digest: string; size: number };
  layers: ModelLayer[];
  /** Sum of the layer sizes. */
  bytes: number;
}

export function layerName(index: number, digest: string, filepath?: string): string {
  return `layer ${index} (${digest.slice(0, 19)}${filepath !== undefined ? `, ${filepath}` : ''})`;
}

/**
 * Parses `body` (the manifest's bytes, `digest` their sha256) for `what` (the reference, for messages); throws an
 * {@link OciError}: NotModelPack for any other manifest, UnknownMediaType / InvalidLayer naming the layer.
 */
export function parseModelManifest(
  body: Buffer,
  digest: string,
  contentType: string | undefined,
  what: string,
): ModelManifest {
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    throw new OciError(OciReason.NotModelPack, `the manifest of ${what} is not JSON`);
  }
  const declared = (json as { mediaType?: unknown } | null)?.mediaType ?? contentType?.split(';')[0]?.trim();
  if (declared === OCI_INDEX || declared === DOCKER_LIST)
    throw new OciError(
      OciReason.NotModelPack,
      `${what} is an image index (${declared}), not a model manifest: give the reference of the model artifact itself`,
    );
  if (declared === DOCKER_MANIFEST)
    throw new OciError(
      OciReason.NotModelPack,
      `${what} is a Docker image manifest, not a ModelPack model manifest (${OCI_MANIFEST} with artifactType application/vnd.cncf.model.manifest.v1+json): push the model with modctl or another ModelPack tool`,
    );
  if (declared !== undefined && declared !== OCI_MANIFEST)
    throw new OciError(
      OciReason.UnknownMediaType,
      `the manifest of ${what} has media type ${String(declared)}; a model is an ${OCI_MANIFEST}`,
    );
  const parsed = ManifestSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new OciError(
      OciReason.NotModelPack,
      `the manifest of ${what} is not an OCI image manifest: ${issue.path.join('.') || '(root)'}: ${issue.message}`,
    );
  }
  const m = parsed.data;
  // model-spec requires artifactType; a manifest written without it is a model when its config says so.
  const model =
    m.artifactType !== undefined ? isModelArtifactType(m.artifactType) : isModelConfig(m.config.mediaType);
  if (!model)
    throw new OciError(
      OciReason.NotModelPack,
      `${what} is not a ModelPack model: its artifactType is ${m.artifactType ?? 'absent'} and its config is ${m.config.mediaType} (a model has artifactType ${MODEL_ARTIFACT_TYPE}, or the older vnd.cnai one): push the model with modctl or another ModelPack tool`,
    );
  if (!isModelConfig(m.config.mediaType))
    throw new OciError(
      OciReason.UnknownMediaType,
      `the config of ${what} has media type ${m.config.mediaType}, not a model config (application/vnd.cncf.model.config.v1+json)`,
    );
  if (m.layers.length === 0)
    throw new OciError(OciReason.NotModelPack, `${what} has no layers: nothing to place`);
  const seen = new Map<string, string>();
  const layers = m.layers.map((d, index) => modelLayer(d, index, what, seen));
  return {
    digest,
    artifactType: m.artifactType ?? m.config.mediaType,
    config: { mediaType: m.config.mediaType, digest: m.config.digest, size: m.config.size },
    layers,
    bytes: layers.reduce((s, l) => s + l.size, 0),
  };
}

/** Layer `index` of the manifest of `what`, checked: a ModelPack media type, a safe file path, a raw layer's path
 *  named once (`seen`: path -> the layer that named it). */
function modelLayer(d: ManifestLayer, index: number, what: string, seen: Map<string, string>): ModelLayer {
  const filepath = d.annotations?.[FILEPATH_ANNOTATION] ?? d.annotations?.[LEGACY_FILEPATH_ANNOTATION];
  const name = layerName(index, d.digest, filepath);
  const type = layerType(d.mediaType);
  if (!type)
    throw new OciError(
      OciReason.UnknownMediaType,
      `${name} of ${what} has media type ${d.mediaType}, which is not a ModelPack layer (application/vnd.cncf.model.{weight,weight.config,doc,code,dataset}.v1.{raw,tar,tar+gzip,tar+zstd})`,
      { layer: name },
    );
  if (filepath !== undefined) {
    const problem = pathProblem(filepath);
    if (problem)
      throw new OciError(
        OciReason.InvalidLayer,
        `${name} of ${what}: its file path annotation must be a relative path inside the model (${problem})`,
        { layer: name },
      );
  }
  if (type.format === 'raw') {
    if (filepath === undefined)
      throw new OciError(
        OciReason.InvalidLayer,
        `${name} of ${what} is a raw layer without the ${FILEPATH_ANNOTATION} annotation: nothing says where its file goes`,
        { layer: name },
      );
    const other = seen.get(filepath);
    if (other !== undefined)
      throw new OciError(
        OciReason.InvalidLayer,
        `${name} of ${what} names the file ${filepath}, as ${other} does`,
        { layer: name },
      );
    seen.set(filepath, name);
  }
  return { index, digest: d.digest, size: d.size, mediaType: d.mediaType, ...type, filepath, name };
}
