/**
 * ServedModel `spec.source.oci`: a model kept as a ModelPack artifact in an OCI registry (modctl's, model-spec
 * v0.0.7 or the older `vnd.cnai` types). The operator resolves the reference to a manifest digest once per
 * generation; the agent beside each replica places every layer through the node's peer, checked by digest.
 */
import { z } from 'zod';
import { SecretRef } from './common.ts';
import { parseOciReference } from './oci-reference.ts';

const HOST_PART = '[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?';
const PORT = ':[0-9]{1,5}';
/** A registry host as the reference parser takes it: a dotted name or a port or localhost (none is implied). */
const REGISTRY = `(${HOST_PART}(\\.${HOST_PART})+(${PORT})?|${HOST_PART}${PORT}|localhost|\\[[0-9a-fA-F:.]+\\](${PORT})?)`;
const COMPONENT = '[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*';
const TAG = '[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}';
const DIGEST = 'sha256:[a-f0-9]{64}';

/** `[oci://]registry/repository:tag`, `…@sha256:…` or both: the grammar of src/oci/reference.ts as one pattern. */
export const OCI_REFERENCE_PATTERN = `^(oci://)?${REGISTRY}/${COMPONENT}(/${COMPONENT})*(:${TAG}(@${DIGEST})?|@${DIGEST})$`;

export const OciSource = z.object({
  reference: z
    .string()
    .max(512)
    .regex(
      new RegExp(OCI_REFERENCE_PATTERN),
      'must be registry/repository:tag or registry/repository@sha256:<64 hex digits> (the registry a host with a dot or a port, or localhost)',
    )
    .superRefine((text, ctx) => {
      try {
        parseOciReference(text);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
      }
    })
    .meta({
      description:
        'The model artifact, `registry/repository:tag` or `registry/repository@sha256:<digest>` (an `oci://` prefix is allowed). A tag is resolved to its manifest digest once per generation (status.source.oci.digest): a moved tag changes nothing until the spec changes or the peerload.io/refresh-source annotation takes a new value.',
    }),
  credentialsSecretRef: SecretRef.optional().meta({
    description:
      "Registry credentials: a `kubernetes.io/dockerconfigjson` Secret (its entry for the reference's registry) or a Secret with `username` and `password`. Read only when the registry is in the operator's --allowed-registry-hosts; the agents get a short-lived token of the registry's token service for pulling this repository only, never the credentials themselves (a registry that takes only Basic credentials is refused, BasicAuthNotForwarded, unless the admin lists it in --allowed-basic-auth-registry-hosts). Unset: anonymous pulls.",
  }),
  maxBytes: z.int().min(1).optional().meta({
    description:
      "Most bytes the model may take on each replica's volume: its raw layers plus what its tar layers unpack to (default: the agent's --max-bytes, 1 TiB). More fails the placement (DiskBudgetExceeded for the layers' sizes, LimitExceeded as a tar layer unpacks); an archive that would unpack past the volume's free space fails too (InsufficientStorage).",
  }),
  plainHTTP: z.boolean().optional().meta({
    description:
      'Talk to the registry over http:// instead of https:// (a registry inside the cluster without TLS). Default false.',
  }),
});
export type OciSource = z.infer<typeof OciSource>;
