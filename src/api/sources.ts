/**
 * The model sources the operator knows, as data: the one place src/api names them (as drivers.ts does for model
 * servers). A ServedModel's and a ModelPreheat's `spec.source` take exactly one member of {@link SOURCES}; the
 * schema, its CEL rule, the API reference and status.source are made from it, and src/sources implements each
 * member (test/unit/source-declarations.test.ts holds the two together). A new kind of source is a row here, its
 * schema beside it, and its implementation in src/sources.
 */
import { z } from 'zod';
import { countSet, withRules } from './common.ts';
import { HubCommit, HubSource } from './source-huggingface.ts';
import { OciSource } from './source-oci.ts';

/** What each source kind is, for the schema's descriptions and the reference. */
export const SOURCES = {
  oci: {
    what: 'an OCI artifact',
    summary:
      "A ModelPack artifact in an OCI registry: every layer placed by the agent through the node's peer, checked against its digest (raw layers on their org.cncf.model.filepath, tar layers extracted).",
    preheat:
      "A ModelPack artifact in an OCI registry: the reference resolved to a manifest digest once per generation (or value of the peerload.io/refresh-source annotation; status.source), and its blobs preheated as a ServedModel's owned preheat would: anonymous, the blob URLs in one file job (at most 100) with the task ids the peerload agent and `peerload fetch oci://` compute; with credentials, the manager's image preheat of the manifest by digest (the Secret's credentials go to the manager, never a token), its tasks tagged with the credentials' tag.",
  },
  huggingface: {
    what: 'a Hugging Face repository',
    summary:
      'A Hugging Face Hub repository at a revision: every file (or those include/exclude choose) placed as the model directory.',
    preheat:
      "A Hugging Face repository: the revision resolved to a commit once per generation (or value of the peerload.io/refresh-source annotation; status.source), its files listed at that commit (include/exclude, maxFiles, maxBytes) and preheated in one job as a ServedModel's owned preheat would: the LFS files at their CDN URLs (largest first) with the CDN's query parameters left out of the task ids, the git files at their resolve URLs without a token only, at most 100 URLs. The token goes only to a Hub host in --allowed-hub-hosts and never to the manager.",
  },
} as const;

/** The member names of `spec.source`. */
export type SourceMember = keyof typeof SOURCES;
export const SOURCE_MEMBERS = Object.keys(SOURCES) as SourceMember[];

/** The members as a sentence: "oci or huggingface". */
const MEMBERS_TEXT = SOURCE_MEMBERS.join(' or ');

const exactlyOne = {
  rule: `[${SOURCE_MEMBERS.map((m) => `has(self.${m})`).join(', ')}].filter(x, x).size() == 1`,
  message: `set exactly one source: ${MEMBERS_TEXT}`,
  reason: 'FieldValueRequired' as const,
  check: (s: Record<string, unknown>) => countSet(...SOURCE_MEMBERS.map((m) => s[m])) === 1,
};

/**
 * Where a model's files come from when not from a bucket: one member. A ServedModel's source is placed by the
 * model server's peerload agent, as a directory is.
 */
export const ModelSource = withRules(
  z.object({
    oci: OciSource.optional().meta({ description: SOURCES.oci.summary }),
    huggingface: HubSource.optional().meta({ description: SOURCES.huggingface.summary }),
  }),
  [exactlyOne],
);
export type ModelSource = z.infer<typeof ModelSource>;

/** A ModelPreheat's spec.source: one member, shaped as a ServedModel's spec.source. */
export const PreheatSource = withRules(
  z.object({
    oci: OciSource.optional().meta({ description: SOURCES.oci.preheat }),
    huggingface: HubSource.optional().meta({ description: SOURCES.huggingface.preheat }),
  }),
  [exactlyOne],
);
export type PreheatSource = z.infer<typeof PreheatSource>;

/** What an OCI reference resolved to. */
export const OciDigest = z.object({
  reference: z.string().meta({ description: 'spec.source.oci.reference as resolved.' }),
  digest: z.string().meta({ description: 'The manifest digest (sha256:...).' }),
});

/** The members of status.source that say what each kind resolved to. */
const resolvedMembers = {
  oci: OciDigest.optional().meta({ description: 'The OCI artifact: its manifest digest.' }),
  huggingface: HubCommit.optional().meta({
    description: 'The Hugging Face repository and the commit its revision resolved to.',
  }),
};

const REFRESH_DESCRIPTION =
  'The value of the peerload.io/refresh-source annotation the resolution answered: a new value resolves again (picks up a moved tag or branch on purpose).';

/** What a ServedModel's spec.source resolved to, for one generation (or one value of the refresh annotation). */
export const SourceStatus = z.object({
  ...resolvedMembers,
  observedGeneration: z.int().meta({ description: 'metadata.generation the source was resolved for.' }),
  refresh: z.string().max(253).optional().meta({ description: REFRESH_DESCRIPTION }),
  layers: z.int().optional().meta({ description: 'Layers of an OCI artifact.' }),
  bytes: z.int().optional().meta({ description: 'Bytes of its layers together.' }),
});
export type SourceStatus = z.infer<typeof SourceStatus>;

/** What a ModelPreheat's spec.source resolved to, for one generation (or one value of the refresh annotation). */
export const PreheatSourceStatus = z.object({
  ...resolvedMembers,
  observedGeneration: z.int().meta({ description: 'metadata.generation the source was resolved for.' }),
  refresh: z
    .string()
    .max(253)
    .optional()
    .meta({
      description: `${REFRESH_DESCRIPTION} The job preheats what it finds.`,
    }),
  files: z
    .int()
    .optional()
    .meta({ description: 'Files (or layers) the source holds after include/exclude.' }),
  bytes: z.int().optional().meta({ description: 'Bytes those files hold together.' }),
  preheated: z.int().optional().meta({
    description:
      'URLs the job preheats (status.tasks): a Hub source its LFS files, and its git files when no token is needed; an OCI source its blobs (0 for an image preheat, whose blobs the manager finds itself); at most 100.',
  }),
});
export type PreheatSourceStatus = z.infer<typeof PreheatSourceStatus>;

/** The annotation whose new value makes the operator resolve spec.source again. */
export const REFRESH_SOURCE_ANNOTATION = 'peerload.io/refresh-source';

/**
 * What the owned preheat of a ServedModel's spec.source warms: the files' URLs and the query parameters left out
 * of their ids (a file preheat), an OCI manifest the manager reads itself (an image preheat with the registry's
 * credentials), or the source itself pinned to what it resolved to, which the ModelPreheat resolves on its own so
 * a credential's task tag is derived when its job is planned and never written to a spec.
 */
export type SourcePreheat = FilePreheat | ImagePreheat | PinnedPreheat;
/** Files by URL, with the query parameters left out of their task ids. */
export interface FilePreheat {
  urls: string[];
  filter: string[];
}
/** A source pinned to what it resolved to (a Hub repository at its commit). */
export interface PinnedPreheat {
  source: PreheatSource;
}
/** An OCI manifest the manager reads, with the registry Secret it asks a token with. */
export interface ImagePreheat {
  image: { url: string; credentialsSecretRef?: { name: string } | undefined };
}
