/**
 * What can go wrong with an OCI model artifact, as one typed error: a reason word (for a condition or an exit
 * status), the layer it concerns when there is one (`layer 2 (sha256:ab12…, weights/model.bin)`), and a message
 * that says what to fix. Messages never hold credentials or a URL's query: they pass {@link redact}.
 */
import { redact } from '../redact.ts';
import {
  SourceBoundReason,
  SourceBudget,
  sourceBounds,
  type BoundHit,
  type SourceBounds,
} from '../http/budget.ts';

export const OciReason = {
  /** The reference is not `registry/repository[:tag][@sha256:…]`. */
  InvalidReference: 'InvalidReference',
  /** The registry host is not in the allow-list, so no credential (and no request) goes there. */
  RegistryNotAllowed: 'RegistryNotAllowed',
  /** The credentials given are unusable (a dockerconfigjson without this registry, a malformed auth). */
  InvalidCredentials: 'InvalidCredentials',
  /** 401 from the registry (or its token service). */
  Unauthorized: 'Unauthorized',
  /** 403 from the registry (or its token service). */
  Forbidden: 'Forbidden',
  /** 404: no such repository, tag, manifest or blob. */
  NotFound: 'NotFound',
  /**
   * The resolution passed a bound of its budget in size (src/http/budget.ts): a manifest over its cap, a token
   * answer, a challenge, the answers together.
   */
  SourceTooLarge: SourceBoundReason.TooLarge,
  /** The resolution (manifest, token, authorization) did not complete within its deadline. */
  SourceTimeout: SourceBoundReason.Timeout,
  /** The manifest is not a ModelPack model manifest (an image, an index, something else). */
  NotModelPack: 'NotModelPack',
  /** A layer (or the artifact) has a media type this reader does not know. */
  UnknownMediaType: 'UnknownMediaType',
  /** A layer's annotations are unusable (no file path, an unsafe one, two layers on one path). */
  InvalidLayer: 'InvalidLayer',
  /** The bytes served do not hash to the digest asked for. */
  DigestMismatch: 'DigestMismatch',
  /** The artifact is over the byte cap (the placer's DiskBudgetExceeded, in `peerload fetch oci://`'s terms). */
  LimitExceeded: 'LimitExceeded',
  /**
   * The registry takes only Basic credentials (no token service), and the admin does not allow forwarding them to
   * the agents (--allowed-basic-auth-registry-hosts).
   */
  BasicAuthNotForwarded: 'BasicAuthNotForwarded',
  /** The token service's token is larger than an agent takes as a header. */
  TokenTooLarge: 'TokenTooLarge',
  /** The registry answered with something else (5xx, a body that does not parse). */
  RegistryError: 'RegistryError',
  /**
   * A blob could not be downloaded through the peer proxy. (What a tar layer holds is refused with the placer's
   * reasons, src/place/errors.ts: UnsafeTarEntry, InvalidArchive, LimitExceeded, InsufficientStorage.)
   */
  DownloadFailed: 'DownloadFailed',
} as const;
export type OciReason = (typeof OciReason)[keyof typeof OciReason];

export class OciError extends Error {
  readonly reason: OciReason;
  /** How the layer is named in the message, when the error is about one. */
  readonly layer: string | undefined;
  /** The HTTP status of the answer that caused it, when there was one. */
  readonly status: number | undefined;
  constructor(
    reason: OciReason,
    message: string,
    opts: { layer?: string | undefined; status?: number | undefined; secrets?: (string | undefined)[] } = {},
  ) {
    super(redact(message, opts.secrets ?? []));
    this.name = 'OciError';
    this.reason = reason;
    this.layer = opts.layer;
    this.status = opts.status;
  }
}

/** A registry exchange's own time-out, ms. */
export const DEFAULT_REGISTRY_TIMEOUT_MS = 60_000;

/**
 * One resolution's budget against a registry and its token service (src/http/budget.ts): every answer (the
 * manifest, a 401's challenge, the token) read through it, a bound hit an {@link OciError} that says which bound.
 */
export function ociBudget(registry: string, bounds: Partial<SourceBounds> = {}): SourceBudget<OciError> {
  return new SourceBudget(sourceBounds({ requestTimeoutMs: DEFAULT_REGISTRY_TIMEOUT_MS, ...bounds }), {
    terms: { whole: `the resolution of ${registry}`, holder: 'the artifact' },
    toError: (hit: BoundHit) =>
      new OciError(
        hit.reason,
        hit.failure === 'timedOut'
          ? `${hit.message}: the registry ${registry} (or its token service) did not answer in time; it is asked again later`
          : `${hit.message}: check that ${registry} (and its token service) is an OCI registry; a model manifest is far smaller (raise the manifest cap if it is right)`,
      ),
  });
}
