/**
 * The files of a ServedModel whose model is a Hugging Face repository (spec.source.huggingface), as a driver
 * receives them (`Registration.files`): each git file at its `resolve` URL at the commit (the token as that file's
 * header only, when the repository needs one), each LFS file at its CDN URL with the CDN's query parameters left
 * out of the task id, and every LFS file's sha256 for the agent to check (src/huggingface/version-spec.ts).
 *
 * The revision is resolved once per generation (or per value of the refresh annotation) and recorded in
 * status.source: a pass after an operator restart lists the recorded commit again rather than the branch's new head,
 * so a moved branch changes nothing until the spec or the annotation does. The CDN URLs are signed for a while
 * (about an hour on the Hub), so they are asked for again when older than half of that; the task ids do not change.
 */
import { createHash } from 'node:crypto';
import { getGlobalDispatcher, type Dispatcher } from 'undici';
import {
  REFRESH_SOURCE_ANNOTATION,
  type ServedModel,
  type ServedModelSpec,
  type FilePreheat,
  type SourceStatus,
} from '../../api/index.ts';
import type { HubSource } from '../../api/source-huggingface.ts';
import { HubClient, isHubError } from '../../huggingface/client.ts';
import { hubEndpoint, type HubEndpoint } from '../../huggingface/endpoint.ts';
import { HubReason } from '../../huggingface/errors.ts';
import {
  DEFAULT_LISTING_LIMITS,
  listRepoFiles,
  type HubListing,
  type HubListingLimits,
} from '../../huggingface/files.ts';
import { lfsLocations } from '../../huggingface/locations.ts';
import { hubVersionSpec } from '../../huggingface/version-spec.ts';
import type { HostRule } from '../../policy/reach.ts';
import { redact } from '../../redact.ts';
import type { ModelFiles } from '../../servers/driver.ts';

/** A source's files for one generation, or why there are none. */
export type SourceFiles =
  | {
      ok: true;
      files: ModelFiles;
      count: number;
      bytes: number;
      digest: string;
      status: SourceStatus;
      listing: HubListing;
      /**
       * What the owned preheat warms: the URLs of the generation's first listing (a preheat job runs once; new
       * signatures would only rewrite its spec), LFS files first, git files only without a token (it would have
       * to travel in the job), at most 100.
       */
      preheat: FilePreheat | undefined;
    }
  | {
      ok: false;
      /** `final`: only a spec (or annotation) edit tries again; else the next pass does. */
      final: boolean;
      reason: HubReason;
      message: string;
    };

export interface HubSourcesDeps {
  /** One key of a Secret of the namespace. */
  secretValue(namespace: string, ref: { name: string; key: string }, signal?: AbortSignal): Promise<string>;
  /** Hosts the token may go to (--allowed-hub-hosts). */
  tokenHosts: readonly HostRule[];
  dispatcher?: Dispatcher | undefined;
  limits?: HubListingLimits | undefined;
  now?: () => number;
}

/** CDN URLs are asked for again after this long (the Hub signs them for an hour). */
export const RELOCATE_AFTER_MS = 30 * 60_000;

interface Kept {
  /** uid, generation and refresh value the listing answers. */
  id: string;
  listing: HubListing;
  locatedAt: number;
  result: Extract<SourceFiles, { ok: true }>;
}

const FINAL: ReadonlySet<string> = new Set([
  HubReason.TokenRequired,
  HubReason.TokenRejected,
  HubReason.TokenNotAllowed,
  HubReason.Forbidden,
  HubReason.RepoNotFound,
  HubReason.RevisionNotFound,
  HubReason.NoFiles,
  HubReason.TooLarge,
  HubReason.BadAnswer,
]);

const refreshOf = (sm: ServedModel) => sm.metadata.annotations?.[REFRESH_SOURCE_ANNOTATION];

/** The Hub of a source, with the admin's allow-list for the token. */
export function sourceEndpoint(hf: HubSource, tokenHosts: readonly HostRule[]): HubEndpoint {
  return { ...hubEndpoint(hf.endpoint?.replace(/\/$/, '')), tokenHosts };
}

export class HubSources {
  private readonly deps: HubSourcesDeps;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: HubSourcesDeps) {
    this.deps = deps;
  }

  async of(key: string, sm: ServedModel, spec: ServedModelSpec, signal?: AbortSignal): Promise<SourceFiles> {
    const hf = spec.source!.huggingface!;
    const id = `${sm.metadata.uid}/${sm.metadata.generation}/${refreshOf(sm) ?? ''}`;
    const now = (this.deps.now ?? Date.now)();
    const kept = this.byKey.get(key);
    if (kept?.id === id && now - kept.locatedAt < RELOCATE_AFTER_MS) return kept.result;
    try {
      const endpoint = sourceEndpoint(hf, this.deps.tokenHosts);
      const token = hf.tokenSecretRef
        ? await this.deps.secretValue(sm.metadata.namespace!, hf.tokenSecretRef, signal)
        : undefined;
      const client = new HubClient({
        endpoint,
        token,
        dispatcher: this.deps.dispatcher ?? getGlobalDispatcher(),
      });
      const listing =
        kept?.id === id
          ? kept.listing
          : await listRepoFiles(client, hf.repo, pinned(sm, hf), hf, this.limits(), signal);
      const locations = await lfsLocations(client, listing, signal);
      const result = filesOf(sm, hf, endpoint, client, listing, locations);
      if (kept?.id === id) result.preheat = kept.result.preheat;
      this.byKey.set(key, { id, listing, locatedAt: now, result });
      return result;
    } catch (err) {
      return failure(hf, err);
    }
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }

  private limits(): HubListingLimits {
    return this.deps.limits ?? DEFAULT_LISTING_LIMITS;
  }
}

/**
 * The revision to list: the commit status.source recorded for this generation and refresh value (an operator
 * restart lists the same commit, not a branch's new head), else the spec's revision.
 */
export function pinned(sm: ServedModel, hf: HubSource): string {
  const s = sm.status?.source;
  const h = s?.huggingface;
  const same =
    s !== undefined &&
    s.observedGeneration === sm.metadata.generation &&
    s.refresh === refreshOf(sm) &&
    h?.repo === hf.repo &&
    h.revision === hf.revision;
  return same ? h.commit : hf.revision;
}

function filesOf(
  sm: ServedModel,
  hf: HubSource,
  endpoint: HubEndpoint,
  client: HubClient,
  listing: HubListing,
  locations: ReadonlyMap<string, string>,
): Extract<SourceFiles, { ok: true }> {
  const {
    version: _v,
    directory: _d,
    ...files
  } = hubVersionSpec(endpoint, listing, locations, {
    headers: client.authHeaders(),
  });
  const refresh = refreshOf(sm);
  return {
    ok: true,
    files,
    count: listing.files.length,
    bytes: listing.files.reduce((n, f) => n + f.size, 0),
    digest: sourceDigest(listing),
    preheat: preheatOf(files.files, files.filter ?? [], hf.tokenSecretRef === undefined),
    status: {
      huggingface: { repo: hf.repo, revision: hf.revision, commit: listing.sha },
      observedGeneration: sm.metadata.generation ?? 0,
      ...(refresh !== undefined ? { refresh } : {}),
    },
    listing,
  };
}

/** Most URLs of one ModelPreheat. */
const MAX_PREHEAT_URLS = 100;

/** The URLs an owned preheat warms: the LFS files' first (the bulk of a model), git files only when public. */
export function preheatOf(
  files: readonly { url?: string | undefined; sha256?: string | undefined; size?: number | undefined }[],
  filter: string[],
  withGitFiles: boolean,
): FilePreheat | undefined {
  const lfs = files.filter((f) => f.sha256 !== undefined).sort((a, b) => (b.size ?? 0) - (a.size ?? 0));
  const git = withGitFiles ? files.filter((f) => f.sha256 === undefined) : [];
  const urls = [...lfs, ...git].slice(0, MAX_PREHEAT_URLS).map((f) => f.url!);
  return urls.length > 0 ? { urls, filter } : undefined;
}

/** The commit and each file's path, size and content id: a new commit is a new registration. */
export function sourceDigest(listing: HubListing): string {
  const h = createHash('sha256').update(`${listing.sha}\n`);
  for (const f of listing.files) h.update(`${f.path}\0${f.size}\0${f.sha256 ?? f.blobId}\n`);
  return h.digest('hex').slice(0, 16);
}

/** A listing's failure as the condition says it: the field to change and the Hub's reason. */
function failure(hf: HubSource, err: unknown): Extract<SourceFiles, { ok: false }> {
  if (isHubError(err)) {
    const field = err.field === 'token' ? 'tokenSecretRef' : (err.field ?? 'repo');
    return {
      ok: false,
      final: FINAL.has(err.reason),
      reason: err.reason,
      message: redact(`spec.source.huggingface.${field}: ${hf.repo}@${hf.revision}: ${err.message}`),
    };
  }
  // A missing Secret or key names itself; anything else is redacted and tried again.
  return {
    ok: false,
    final: false,
    reason: HubReason.Unavailable,
    message: redact(`spec.source.huggingface: ${hf.repo}@${hf.revision}: ${(err as Error).message}`),
  };
}
