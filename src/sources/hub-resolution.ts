/**
 * A Hugging Face source as both controllers resolve it (a ServedModel's `spec.source.huggingface` and a
 * ModelPreheat's): the token read from its Secret only for an endpoint the admin allows, the revision resolved and
 * listed once per resolution (a generation, or a value of the peerload.io/refresh-source annotation), each LFS file's
 * CDN URL asked for again once older than half its signature's life, the URLs a preheat warms, and a failure as a
 * condition says it (the field to change, never the token).
 */
import { createHash } from 'node:crypto';
import { getGlobalDispatcher, type Dispatcher } from 'undici';
import { REFRESH_SOURCE_ANNOTATION } from '../api/index.ts';
import type { HubSource } from '../api/source-huggingface.ts';
import { HubClient, isHubError } from '../huggingface/client.ts';
import { hubEndpoint, type HubEndpoint } from '../huggingface/endpoint.ts';
import { HubReason, hubBudget } from '../huggingface/errors.ts';
import {
  DEFAULT_LISTING_LIMITS,
  listRepoFiles,
  type HubListing,
  type HubListingLimits,
} from '../huggingface/files.ts';
import { lfsLocations } from '../huggingface/locations.ts';
import type { HostRule } from '../policy/reach.ts';
import { redact } from '../redact.ts';
import { hubTokenTag } from '../storage/credential-tag.ts';

export interface HubResolverDeps {
  /** One key of a Secret of the namespace. */
  secretValue(namespace: string, ref: { name: string; key: string }, signal?: AbortSignal): Promise<string>;
  /** Hosts the token may go to (--allowed-hub-hosts). */
  tokenHosts: readonly HostRule[];
  /** Hosts an LFS file's redirect may name besides the Hub's own (--allowed-hub-redirect-hosts). */
  redirectHosts: readonly HostRule[];
  dispatcher?: Dispatcher | undefined;
  /** The resolution's bounds the operator sets (--source-timeout); the rest are the budget's defaults. */
  limits?: Partial<HubListingLimits> | undefined;
  now?: () => number;
}

/** A source's listing at its commit, with the LFS files' CDN URLs as the Hub redirected to them at `locatedAt`. */
export interface HubResolution {
  endpoint: HubEndpoint;
  client: HubClient;
  listing: HubListing;
  locations: ReadonlyMap<string, string>;
  locatedAt: number;
  /**
   * The token's task tag (storage/credential-tag.ts), when the source has a token: every file's task (git and LFS)
   * carries it, so a gated or private file is named only by holders of the token. Undefined: a public source,
   * whose tasks every tenant shares.
   */
  tag: string | undefined;
}

/** CDN URLs are asked for again after this long (the Hub signs them for an hour). */
export const RELOCATE_AFTER_MS = 30 * 60_000;

/** Reasons only a change of the spec, a Secret or the refresh annotation can clear. */
const FINAL_HUB_REASONS: ReadonlySet<string> = new Set([
  HubReason.TokenRequired,
  HubReason.TokenRejected,
  HubReason.TokenNotAllowed,
  HubReason.Forbidden,
  HubReason.RepoNotFound,
  HubReason.RevisionNotFound,
  HubReason.NoFiles,
  HubReason.TooLarge,
  HubReason.BadAnswer,
  HubReason.RedirectNotAllowed,
  // A size bound of the resolution: the same answers pass it again (a time-out is tried again with backoff).
  HubReason.SourceTooLarge,
]);

/** The value of the refresh annotation an object carries. */
export const refreshOf = (o: { metadata: { annotations?: Record<string, string> | undefined } }) =>
  o.metadata.annotations?.[REFRESH_SOURCE_ANNOTATION];

/** The Hub of a source, with the admin's allow-list for the token. */
function sourceEndpoint(hf: HubSource, tokenHosts: readonly HostRule[]): HubEndpoint {
  return { ...hubEndpoint(hf.endpoint?.replace(/\/$/, '')), tokenHosts };
}

/** What a status recorded of a resolution (status.source). */
interface RecordedSource {
  observedGeneration: number;
  refresh?: string | undefined;
  huggingface?: { repo: string; revision: string; commit: string } | undefined;
}

/**
 * The revision to list: the commit `recorded` holds for this generation and refresh value (an operator restart
 * lists the same commit, not a branch's new head), else the spec's revision.
 */
export function pinnedRevision(
  recorded: RecordedSource | undefined,
  generation: number | undefined,
  refresh: string | undefined,
  hf: HubSource,
): string {
  const h = recorded?.huggingface;
  const same =
    recorded !== undefined &&
    recorded.observedGeneration === generation &&
    recorded.refresh === refresh &&
    h?.repo === hf.repo &&
    h.revision === hf.revision;
  return same ? h.commit : hf.revision;
}

interface Kept {
  id: string;
  resolution: HubResolution;
}

/** The resolution of each object's source, by key, for its current resolution id only. */
export class HubResolver {
  private readonly deps: HubResolverDeps;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: HubResolverDeps) {
    this.deps = deps;
  }

  /**
   * The kept resolution while its CDN URLs are fresh; else the listing of this id (kept, or made now at
   * `revision`) with its CDN URLs asked for now. Throws a HubError, or the Secret read's error.
   */
  async resolve(
    key: string,
    id: string,
    namespace: string,
    hf: HubSource,
    revision: string,
    signal?: AbortSignal,
  ): Promise<HubResolution> {
    const now = (this.deps.now ?? Date.now)();
    const kept = this.byKey.get(key);
    const same = kept?.id === id;
    if (same && now - kept.resolution.locatedAt < RELOCATE_AFTER_MS) return kept.resolution;
    const endpoint = sourceEndpoint(hf, this.deps.tokenHosts);
    const token = hf.tokenSecretRef
      ? await this.deps.secretValue(namespace, hf.tokenSecretRef, signal)
      : undefined;
    // One budget for the whole resolution, listing and LFS HEADs: one deadline, the bytes and entries bounded.
    const budget = hubBudget(endpoint.url, hf.repo, { ...DEFAULT_LISTING_LIMITS, ...this.deps.limits });
    let listing: HubListing;
    let locations: Map<string, string>;
    let client: HubClient;
    try {
      client = new HubClient({
        endpoint,
        token,
        dispatcher: this.deps.dispatcher ?? getGlobalDispatcher(),
        budget,
      });
      listing = same ? kept.resolution.listing : await listRepoFiles(client, hf.repo, revision, hf, signal);
      locations = await lfsLocations(
        client,
        listing,
        { hosts: this.deps.redirectHosts, flag: '--allowed-hub-redirect-hosts' },
        signal,
      );
    } finally {
      budget.close();
    }
    const tag = token !== undefined ? hubTokenTag(endpoint.url, hf.repo, token) : undefined;
    const resolution = { endpoint, client, listing, locations, locatedAt: now, tag };
    this.byKey.set(key, { id, resolution });
    return resolution;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }
}

/** Most URLs of one ModelPreheat. */
const MAX_PREHEAT_URLS = 100;

/**
 * The URLs a preheat of the files warms and the query parameters left out of their task ids: the LFS files' first
 * (the bulk of a model), largest first; git files only without a token (it would have to travel in the manager's
 * job, which keeps its headers); at most 100. Undefined when nothing is left.
 */
export function preheatOf(
  files: readonly { url?: string | undefined; sha256?: string | undefined; size?: number | undefined }[],
  filter: string[],
  withGitFiles: boolean,
): { urls: string[]; filter: string[] } | undefined {
  const lfs = files.filter((f) => f.sha256 !== undefined).sort((a, b) => (b.size ?? 0) - (a.size ?? 0));
  const git = withGitFiles ? files.filter((f) => f.sha256 === undefined) : [];
  const urls = [...lfs, ...git].slice(0, MAX_PREHEAT_URLS).map((f) => f.url!);
  return urls.length > 0 ? { urls, filter } : undefined;
}

/** The commit and each file's path, size and content id: a new commit is new content. */
export function sourceDigest(listing: HubListing): string {
  const h = createHash('sha256').update(`${listing.sha}\n`);
  for (const f of listing.files) h.update(`${f.path}\0${f.size}\0${f.sha256 ?? f.blobId}\n`);
  return h.digest('hex').slice(0, 16);
}

/** A resolution's failure as a condition says it. */
export interface HubFailure {
  /** Only a spec (or annotation, or Secret) edit tries again; else a later pass does. */
  final: boolean;
  reason: HubReason;
  message: string;
}

/** A failure of the source at `field` (`spec.source.huggingface`): the field to change and the Hub's reason. */
export function hubFailure(field: string, hf: HubSource, err: unknown): HubFailure {
  if (isHubError(err)) {
    const sub = err.field === 'token' ? 'tokenSecretRef' : (err.field ?? 'repo');
    return {
      final: FINAL_HUB_REASONS.has(err.reason),
      reason: err.reason,
      message: redact(`${field}.${sub}: ${hf.repo}@${hf.revision}: ${err.message}`),
    };
  }
  // A missing Secret or key names itself; anything else is redacted and tried again.
  return {
    final: false,
    reason: HubReason.Unavailable,
    message: redact(`${field}: ${hf.repo}@${hf.revision}: ${(err as Error).message}`),
  };
}
