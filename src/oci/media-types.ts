/**
 * The media types of ModelPack model artifacts: model-spec v0.0.7 (`vnd.cncf.model.*`, annotation
 * `org.cncf.model.filepath`) and the older `vnd.cnai.model.*` / `org.cnai.model.filepath` that modctl v0.2 still
 * writes by default (registries registered their model processors against those names).
 */

import { ARCHIVE_FORMATS } from '../place/spec.ts';

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';

export const MODEL_ARTIFACT_TYPE = 'application/vnd.cncf.model.manifest.v1+json';
export const LEGACY_MODEL_ARTIFACT_TYPE = 'application/vnd.cnai.model.manifest.v1+json';
export const MODEL_CONFIG = 'application/vnd.cncf.model.config.v1+json';
export const LEGACY_MODEL_CONFIG = 'application/vnd.cnai.model.config.v1+json';

export const FILEPATH_ANNOTATION = 'org.cncf.model.filepath';
export const LEGACY_FILEPATH_ANNOTATION = 'org.cnai.model.filepath';

/** What a model manifest's GET asks for: the OCI manifest first; an index or a Docker type gets a clear refusal. */
export const MANIFEST_ACCEPT = [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST].join(', ');

export const LAYER_KINDS = ['weight', 'weight.config', 'doc', 'code', 'dataset'] as const;
export type LayerKind = (typeof LAYER_KINDS)[number];
/** A raw layer is a file; the others are the archives the placer extracts (src/place/spec.ts). */
export const LAYER_FORMATS = ['raw', ...ARCHIVE_FORMATS] as const;
export type LayerFormat = (typeof LAYER_FORMATS)[number];

export interface LayerType {
  kind: LayerKind;
  format: LayerFormat;
  /** A `vnd.cnai.model.*` type. */
  legacy: boolean;
}

const LAYER =
  /^application\/vnd\.(cncf|cnai)\.model\.(weight|weight\.config|doc|code|dataset)\.v1\.(raw|tar|tar\+gzip|tar\+zstd)$/;

/** The kind and format of a model layer's media type; undefined for any other type. */
export function layerType(mediaType: string): LayerType | undefined {
  const m = LAYER.exec(mediaType);
  if (!m) return undefined;
  return { kind: m[2] as LayerKind, format: m[3] as LayerFormat, legacy: m[1] === 'cnai' };
}

export const isModelArtifactType = (t: string | undefined) =>
  t === MODEL_ARTIFACT_TYPE || t === LEGACY_MODEL_ARTIFACT_TYPE;
export const isModelConfig = (t: string | undefined) => t === MODEL_CONFIG || t === LEGACY_MODEL_CONFIG;
