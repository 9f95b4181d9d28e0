/**
 * A ModelPreheat of a Hugging Face repository (spec.source.huggingface): the revision resolved to a commit once per
 * generation (or value of the peerload.io/refresh-source annotation) and pinned through restarts by status.source,
 * the files listed at that commit, and one job of their URLs planned exactly as a ServedModel's owned preheat of the
 * same source is (hub-resolution.ts chooses the URLs and the filter, request.ts plans the job of a `urls` spec), so
 * status.tasks holds the task ids the peerload agent and `peerload fetch hf://` compute for those files.
 *
 * The token is read only for an endpoint the admin allows (the reconciler asks hubReach first, and the Hub client
 * refuses it too) and goes to the Hub alone: the job carries the LFS files' CDN URLs, signed by the Hub for a while,
 * and the git files only when no token is needed.
 */
import { hubVersionSpec } from '../../huggingface/version-spec.ts';
import { isHubError } from '../../huggingface/client.ts';
import { HubReason } from '../../huggingface/errors.ts';
import type {
  ModelPreheat,
  ModelPreheatSpec,
  ModelPreheatStatus,
  PreheatSourceStatus,
} from '../../api/index.ts';
import type { TaskIdRule } from '../../storage/taskid.ts';
import {
  HubResolver,
  hubFailure,
  pinnedRevision,
  preheatOf,
  refreshOf,
  type HubFailure,
  type HubResolution,
  type HubResolverDeps,
} from '../hub-resolution.ts';
import type { SecretReader } from '../secrets.ts';
import { planPreheat, type PreheatPlan } from './request.ts';

/** The field every Hub failure names. */
const FIELD = 'spec.source.huggingface';

/** A source that cannot be preheated as it stands: what the condition says, and what status.source records. */
export class HubSourceError extends Error {
  readonly failure: HubFailure;
  /** status.source after the failure: this resolution answered (a refresh value is not tried again by itself). */
  readonly record: (s: ModelPreheatStatus) => ModelPreheatStatus;
  constructor(failure: HubFailure, record: (s: ModelPreheatStatus) => ModelPreheatStatus) {
    super(failure.message);
    this.name = 'HubSourceError';
    this.failure = failure;
    this.record = record;
  }
}

/**
 * Whether status.source answered another value of the refresh annotation than the object carries now, for this
 * generation: the job status holds and its outcome are of the commit before, so the source is resolved again.
 */
export function sourceRefreshed(obj: ModelPreheat, spec: ModelPreheatSpec): boolean {
  const recorded = obj.status?.source;
  return (
    spec.source !== undefined &&
    recorded !== undefined &&
    recorded.observedGeneration === obj.metadata.generation &&
    (recorded.refresh ?? '') !== (refreshOf(obj) ?? '')
  );
}

/** What a Hub preheat's job is: the plan of a `urls` spec, its content key and what status.source says. */
interface HubPlan extends PreheatPlan {
  contentKey: string;
  source: PreheatSourceStatus;
}

export class HubPreheats {
  private readonly resolver: HubResolver;
  private readonly secrets: SecretReader;

  /** `secrets`: the reconciler's Secret reads (the token's key). */
  constructor(secrets: SecretReader, deps: Omit<HubResolverDeps, 'secretValue'>) {
    this.secrets = secrets;
    this.resolver = new HubResolver({
      ...deps,
      secretValue: (namespace, ref, signal) => secrets.value(namespace, ref, signal),
    });
  }

  /**
   * This generation's job of the repository's files. Throws {@link HubSourceError} for what the Hub answered;
   * a Secret that cannot be read throws its own error (the reconciler names it).
   */
  async plan(
    obj: ModelPreheat,
    spec: ModelPreheatSpec,
    bio: string,
    rule: TaskIdRule,
    contentKeyOf: (spec: ModelPreheatSpec, commit: string) => string,
    signal?: AbortSignal,
  ): Promise<HubPlan> {
    const hf = spec.source!.huggingface;
    const { uid, generation, namespace } = obj.metadata;
    const refresh = refreshOf(obj);
    const recorded: PreheatSourceStatus = {
      observedGeneration: generation ?? 0,
      ...(refresh !== undefined ? { refresh } : {}),
    };
    let r: HubResolution;
    try {
      const revision = pinnedRevision(obj.status?.source, generation, refresh, hf);
      const key = `${namespace}/${obj.metadata.name}`;
      r = await this.resolver.resolve(
        key,
        `${uid}/${generation}/${refresh ?? ''}`,
        namespace!,
        hf,
        revision,
        signal,
      );
    } catch (err) {
      if (!isHubError(err)) throw err;
      throw new HubSourceError(hubFailure(FIELD, hf, err), (s) => failedSource(s, recorded));
    }
    const files = hubVersionSpec(r.endpoint, r.listing, r.locations, {
      headers: r.client.authHeaders(),
      tag: r.tag,
    });
    const warm = preheatOf(files.files, files.filter ?? [], hf.tokenSecretRef === undefined);
    const source: PreheatSourceStatus = {
      ...recorded,
      huggingface: { repo: hf.repo, revision: hf.revision, commit: r.listing.sha },
      files: r.listing.files.length,
      bytes: r.listing.files.reduce((n, f) => n + f.size, 0),
      preheated: warm?.urls.length ?? 0,
    };
    if (!warm)
      throw new HubSourceError(
        {
          final: true,
          reason: HubReason.NoFiles,
          message: `${FIELD}.tokenSecretRef: ${hf.repo} at ${r.listing.sha} has no LFS file, and its git files are not preheated with a token (it would travel in the manager's job): the agents fetch them from the Hub`,
        },
        (s) => failedSource(s, source),
      );
    const plan = await planPreheat(
      asURLs(spec, warm, r.tag),
      namespace!,
      this.secrets,
      { bio },
      new Date(),
      signal,
      rule,
    );
    return { ...plan, contentKey: contentKeyOf(spec, r.listing.sha), source };
  }

  forget(key: string): void {
    this.resolver.forget(key);
  }
}

/**
 * The spec of the job: the source's URLs as a ServedModel's owned preheat names them (`urls`, and the CDN's query
 * parameters as `filteredQueryParams`, none when there are none), the token's tag when there is a token, the rest
 * of the spec (scope, targets, time-out, clusters, peer daemon version) as it is.
 */
function asURLs(
  spec: ModelPreheatSpec,
  warm: { urls: string[]; filter: string[] },
  tag: string | undefined,
): ModelPreheatSpec {
  return {
    ...spec,
    source: undefined,
    type: 'file',
    urls: warm.urls,
    filteredQueryParams: warm.filter.length > 0 ? warm.filter : undefined,
    // The token's tag, only in this spec the job is planned from: never written to the ModelPreheat.
    tag,
  };
}

/**
 * status.source after a failed resolution: what it answered; a job of another resolution (a refresh) no longer
 * counts as this generation's, so its SUCCESS does not stand for content it did not preheat.
 */
function failedSource(s: ModelPreheatStatus, source: PreheatSourceStatus): ModelPreheatStatus {
  const before = s.source;
  const other =
    before !== undefined &&
    before.observedGeneration === source.observedGeneration &&
    before.refresh !== source.refresh;
  return { ...s, source, ...(other ? { jobGeneration: undefined, state: undefined } : {}) };
}
