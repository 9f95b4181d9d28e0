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
import type { HubSource, PreheatSourceStatus, SourcePreheat } from '../api/index.ts';
import { isHubError } from '../huggingface/client.ts';
import { HubReason } from '../huggingface/errors.ts';
import type { HubListing } from '../huggingface/files.ts';
import { hubVersionSpec } from '../huggingface/version-spec.ts';
import { hostAllowed, type CredentialReach, type HostRule } from '../policy/reach.ts';
import { egressRefusal, type EgressLookup } from '../http/egress.ts';
import { DEFAULT_HUB_ENDPOINT } from '../huggingface/endpoint.ts';
import { hubReach } from './hub-reach.ts';
import {
  HubResolver,
  hubFailure,
  pinnedRevision,
  preheatOf,
  sourceDigest,
  type HubResolution,
  type HubResolverDeps,
} from './hub-resolution.ts';
import type { ResolvedSource, SourceFailure, SourceJob, SourceKind, SourceOwner } from './source.ts';

/** A Hub source's reasons: the Hub's, and an endpoint the operator may not reach. */
export type HubSourceReason = HubReason | 'HubNotAllowed';

/** A source's files for one generation, or why there are none. */
export type SourceFiles =
  | (ResolvedSource<HubSourceReason> & {
      listing: HubListing;
      /**
       * What the owned preheat warms. Without a token: the URLs of the generation's first listing (a preheat job
       * runs once; new signatures would only rewrite its spec), LFS files first, at most 100. With a token: the
       * repository pinned to the listed commit, which the ModelPreheat resolves itself (its LFS files only), so the
       * token's task tag comes from the Secret when its job is planned and never sits in its spec.
       */
      preheat: SourcePreheat | undefined;
    })
  | SourceFailure<HubSourceReason>;

export type HubSourcesDeps = HubResolverDeps;

interface Kept {
  /** uid, generation and refresh value the listing answers. */
  id: string;
  resolution: HubResolution;
  result: Extract<SourceFiles, { ok: true }>;
}

/** The resolution id of an owner's source: a new generation or refresh value lists again. */
const idOf = (o: SourceOwner) => `${o.uid}/${o.generation}/${o.refresh}`;

export class HubSources implements SourceKind<HubSource> {
  readonly member = 'huggingface' as const;
  private readonly resolver: HubResolver;
  private readonly tokenHosts: readonly HostRule[];
  private readonly lookup: EgressLookup | undefined;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: HubSourcesDeps) {
    this.resolver = new HubResolver(deps);
    this.tokenHosts = deps.tokenHosts;
    this.lookup = deps.lookup;
  }

  /**
   * A Hub without a token (any endpoint a tenant names) at an internal address the admin does not list in
   * --allowed-hub-hosts: refused before anything is asked of it (the cloud's metadata service, the apiserver, a
   * node's loopback are not Hubs).
   */
  private async egress(hf: HubSource, field: string): Promise<SourceFailure<HubSourceReason> | undefined> {
    if (hf.tokenSecretRef !== undefined) return undefined;
    const endpoint = (hf.endpoint ?? DEFAULT_HUB_ENDPOINT).replace(/\/$/, '');
    const refused = await egressRefusal(endpoint, (u) => hostAllowed(u, this.tokenHosts), this.lookup);
    if (!refused) return undefined;
    return {
      ok: false,
      final: true,
      reason: 'HubNotAllowed',
      message: `${field}.endpoint: the Hub ${refused.message}; an admin lists ${endpoint} in --allowed-hub-hosts to allow it`,
    };
  }

  /** The token is read only for an endpoint in --allowed-hub-hosts; a source without one may name any public Hub. */
  reach(hf: HubSource, field: string): CredentialReach {
    return hubReach(hf, field, this.tokenHosts);
  }

  async files(owner: SourceOwner, hf: HubSource, field: string, signal?: AbortSignal): Promise<SourceFiles> {
    const id = idOf(owner);
    // Checked when this generation's listing is made, not on every pass that reuses it (the guarded Agent still
    // meets each later connection, a CDN URL asked for again included).
    const refused = this.byKey.get(owner.key)?.id === id ? undefined : await this.egress(hf, field);
    if (refused) return refused;
    try {
      const r = await this.resolve(owner, hf, signal);
      const kept = this.byKey.get(owner.key);
      if (kept?.resolution === r) return kept.result;
      const result = filesOf(owner, hf, r);
      if (kept?.id === id) result.preheat = kept.result.preheat;
      this.byKey.set(owner.key, { id, resolution: r, result });
      return result;
    } catch (err) {
      return { ok: false, ...hubFailure(field, hf, err) };
    }
  }

  /**
   * A ModelPreheat of the repository: one job of its files' URLs, planned exactly as a ServedModel's owned preheat
   * of the same source is (the LFS files at their CDN URLs, largest first, with the CDN's query parameters left
   * out of the ids; the git files only without a token, which would travel in the manager's job), the token's tag
   * on every task. Throws only what is not the Hub's answer (a Secret that cannot be read: the
   * reconciler names it).
   */
  async job(owner: SourceOwner, hf: HubSource, field: string, signal?: AbortSignal): Promise<SourceJob> {
    const recorded: PreheatSourceStatus = {
      observedGeneration: owner.generation,
      ...(owner.refresh !== '' ? { refresh: owner.refresh } : {}),
    };
    const refused = await this.egress(hf, field);
    if (refused) return { ok: false, failure: refused, status: recorded };
    let r: HubResolution;
    try {
      r = await this.resolve(owner, hf, signal);
    } catch (err) {
      if (!isHubError(err)) throw err;
      return { ok: false, failure: { ok: false, ...hubFailure(field, hf, err) }, status: recorded };
    }
    const files = hubVersionSpec(r.endpoint, r.listing, r.locations, {
      headers: r.client.authHeaders(),
      tag: r.tag,
    });
    const warm = preheatOf(files.files, files.filter ?? [], hf.tokenSecretRef === undefined);
    const status: PreheatSourceStatus = {
      ...recorded,
      huggingface: { repo: hf.repo, revision: hf.revision, commit: r.listing.sha },
      files: r.listing.files.length,
      bytes: r.listing.files.reduce((n, f) => n + f.size, 0),
      preheated: warm?.urls.length ?? 0,
    };
    if (!warm)
      return {
        ok: false,
        failure: {
          ok: false,
          final: true,
          reason: HubReason.NoFiles,
          message: `${field}.tokenSecretRef: ${hf.repo} at ${r.listing.sha} has no LFS file, and its git files are not preheated with a token (it would travel in the manager's job): the agents fetch them from the Hub`,
        },
        status,
      };
    return {
      ok: true,
      content: { type: 'file', urls: warm.urls, filter: warm.filter, tag: r.tag },
      resolved: r.listing.sha,
      status,
    };
  }

  forget(key: string): void {
    this.resolver.forget(key);
    this.byKey.delete(key);
  }

  private resolve(owner: SourceOwner, hf: HubSource, signal?: AbortSignal): Promise<HubResolution> {
    const refresh = owner.refresh === '' ? undefined : owner.refresh;
    const revision = pinnedRevision(owner.recorded, owner.generation, refresh, hf);
    return this.resolver.resolve(owner.key, idOf(owner), owner.namespace, hf, revision, signal);
  }
}

function filesOf(
  owner: SourceOwner,
  hf: HubSource,
  { endpoint, client, listing, locations, tag }: HubResolution,
): Extract<SourceFiles, { ok: true }> {
  const {
    version: _v,
    directory: _d,
    ...files
  } = hubVersionSpec(endpoint, listing, locations, {
    headers: client.authHeaders(),
    tag,
  });
  const refresh = owner.refresh === '' ? undefined : owner.refresh;
  return {
    ok: true,
    files,
    count: listing.files.length,
    bytes: listing.files.reduce((n, f) => n + f.size, 0),
    digest: sourceDigest(listing),
    ...withPreheat(ownedPreheat(hf, listing, files)),
    status: {
      huggingface: { repo: hf.repo, revision: hf.revision, commit: listing.sha },
      observedGeneration: owner.generation,
      ...(refresh !== undefined ? { refresh } : {}),
    },
    listing,
  };
}

/** The owned preheat, or why there is none. */
function withPreheat(preheat: SourcePreheat | undefined) {
  if (preheat) return { preheat };
  const message = 'the repository has no LFS file, and its git files would need the token in the preheat job';
  return { preheat, unpreheatable: { reason: HubReason.NoFiles, message } };
}

/** What the owned preheat of the source warms (see SourceFiles' `preheat`). */
function ownedPreheat(
  hf: HubSource,
  listing: HubListing,
  files: {
    files: { url?: string | undefined; sha256?: string | undefined }[];
    filter?: string[] | undefined;
  },
): SourcePreheat | undefined {
  if (hf.tokenSecretRef === undefined) return preheatOf(files.files, files.filter ?? [], true);
  // Git files are not preheated with a token (it would travel in the manager's job): no LFS file, nothing to warm.
  if (!listing.files.some((f) => f.sha256 !== undefined)) return undefined;
  return { source: { huggingface: { ...hf, revision: listing.sha } } };
}
