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
import type { ServedModel, ServedModelSpec, SourcePreheat, SourceStatus } from '../../api/index.ts';
import type { HubSource } from '../../api/source-huggingface.ts';
import type { HubReason } from '../../huggingface/errors.ts';
import type { HubListing } from '../../huggingface/files.ts';
import { hubVersionSpec } from '../../huggingface/version-spec.ts';
import type { ModelFiles } from '../../servers/driver.ts';
import {
  HubResolver,
  hubFailure,
  pinnedRevision,
  preheatOf,
  refreshOf,
  sourceDigest,
  type HubResolution,
  type HubResolverDeps,
} from '../hub-resolution.ts';

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
       * What the owned preheat warms. Without a token: the URLs of the generation's first listing (a preheat job
       * runs once; new signatures would only rewrite its spec), LFS files first, at most 100. With a token: the
       * repository pinned to the listed commit, which the ModelPreheat resolves itself (its LFS files only), so the
       * token's task tag comes from the Secret when its job is planned and never sits in its spec.
       */
      preheat: SourcePreheat | undefined;
    }
  | {
      ok: false;
      /** `final`: only a spec (or annotation) edit tries again; else the next pass does. */
      final: boolean;
      reason: HubReason;
      message: string;
    };

export type HubSourcesDeps = HubResolverDeps;

interface Kept {
  /** uid, generation and refresh value the listing answers. */
  id: string;
  resolution: HubResolution;
  result: Extract<SourceFiles, { ok: true }>;
}

export class HubSources {
  private readonly resolver: HubResolver;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: HubSourcesDeps) {
    this.resolver = new HubResolver(deps);
  }

  async of(key: string, sm: ServedModel, spec: ServedModelSpec, signal?: AbortSignal): Promise<SourceFiles> {
    const hf = spec.source!.huggingface!;
    const id = `${sm.metadata.uid}/${sm.metadata.generation}/${refreshOf(sm) ?? ''}`;
    try {
      const revision = pinnedRevision(sm.status?.source, sm.metadata.generation, refreshOf(sm), hf);
      const r = await this.resolver.resolve(key, id, sm.metadata.namespace!, hf, revision, signal);
      const kept = this.byKey.get(key);
      if (kept?.resolution === r) return kept.result;
      const result = filesOf(sm, hf, r);
      if (kept?.id === id) result.preheat = kept.result.preheat;
      this.byKey.set(key, { id, resolution: r, result });
      return result;
    } catch (err) {
      return { ok: false, ...hubFailure('spec.source.huggingface', hf, err) };
    }
  }

  forget(key: string): void {
    this.resolver.forget(key);
    this.byKey.delete(key);
  }
}

function filesOf(
  sm: ServedModel,
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
  const refresh = refreshOf(sm);
  return {
    ok: true,
    files,
    count: listing.files.length,
    bytes: listing.files.reduce((n, f) => n + f.size, 0),
    digest: sourceDigest(listing),
    preheat: ownedPreheat(hf, listing, files),
    status: {
      huggingface: { repo: hf.repo, revision: hf.revision, commit: listing.sha },
      observedGeneration: sm.metadata.generation ?? 0,
      ...(refresh !== undefined ? { refresh } : {}),
    },
    listing,
  };
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
  return { huggingface: { ...hf, revision: listing.sha } };
}
