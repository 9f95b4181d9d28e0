/**
 * A ModelPreheat of a spec.source (src/sources: an OCI artifact, a Hugging Face repository): what it resolves to is
 * fixed once per generation (or value of the peerload.io/refresh-source annotation) and pinned through restarts by
 * status.source, and one job of it is planned exactly as a ServedModel's owned preheat of the same source is (the
 * kind chooses the URLs, the filter and the tag, or an image preheat of a manifest by digest; request.ts plans
 * the job of that spec), so status.tasks holds the task ids the peerload agent and `peerload fetch` compute.
 *
 * A source's credentials are read only where the admin allows (the reconciler asks the kind's reach first) and
 * go to the source alone: the job carries signed or public URLs, and a registry Secret only by reference (the
 * manager's image preheat asks the registry for a token itself).
 */
import type {
  ModelPreheat,
  ModelPreheatSpec,
  ModelPreheatStatus,
  PreheatSourceStatus,
} from '../../api/index.ts';
import {
  ModelSources,
  sourceOwner,
  type SourceFailure,
  type SourceJobContent,
  type SourceReason,
} from '../../sources/index.ts';
import type { TaskIdRule } from '../../storage/taskid.ts';
import type { SecretReader } from '../secrets.ts';
import { planPreheat, type PreheatPlan } from './request.ts';

/** A source that cannot be preheated as it stands: what the condition says, and what status.source records. */
export class SourceJobError extends Error {
  readonly failure: SourceFailure<SourceReason>;
  /** status.source after the failure: this resolution answered (a refresh value is not tried again by itself). */
  readonly record: (s: ModelPreheatStatus) => ModelPreheatStatus;
  constructor(failure: SourceFailure<SourceReason>, record: (s: ModelPreheatStatus) => ModelPreheatStatus) {
    super(failure.message);
    this.name = 'SourceJobError';
    this.failure = failure;
    this.record = record;
  }
}

/**
 * Whether status.source answered another value of the refresh annotation than the object carries now, for this
 * generation: the job status holds and its outcome are of the resolution before, so the source is resolved again.
 */
export function sourceRefreshed(obj: ModelPreheat, spec: ModelPreheatSpec): boolean {
  return spec.source !== undefined && ModelSources.refreshed(sourceOwner(obj));
}

/** What a source preheat's job is: the plan of its spec, its content key and what status.source says. */
interface SourcePlan extends PreheatPlan {
  contentKey: string;
  source: PreheatSourceStatus;
}

export class SourcePreheats {
  private readonly sources: Pick<ModelSources, 'job' | 'forget'>;
  private readonly secrets: SecretReader;

  /** `secrets`: the reconciler's Secret reads (an image preheat's registry Secret). */
  constructor(sources: Pick<ModelSources, 'job' | 'forget'>, secrets: SecretReader) {
    this.sources = sources;
    this.secrets = secrets;
  }

  /**
   * This generation's job of the source. Throws {@link SourceJobError} for what the source answered; a Secret
   * that cannot be read throws its own error (the reconciler names it).
   */
  async plan(
    obj: ModelPreheat,
    spec: ModelPreheatSpec,
    bio: string,
    rule: TaskIdRule,
    contentKeyOf: (spec: ModelPreheatSpec, resolved: string) => string,
    signal?: AbortSignal,
  ): Promise<SourcePlan> {
    const job = await this.sources.job(sourceOwner(obj), spec.source!, signal);
    if (!job.ok) throw new SourceJobError(job.failure, (s) => failedSource(s, job.status));
    const plan = await planPreheat(
      jobSpec(spec, job.content),
      obj.metadata.namespace!,
      this.secrets,
      { bio },
      new Date(),
      signal,
      rule,
    );
    return { ...plan, contentKey: contentKeyOf(spec, job.resolved), source: job.status };
  }

  forget(key: string): void {
    this.sources.forget(key);
  }
}

/**
 * The spec of the job: the source's URLs as a ServedModel's owned preheat names them (`urls`, and the query
 * parameters left out of their ids as `filteredQueryParams`, none when there are none) with the credentials' tag,
 * or an image preheat of a manifest by digest with its registry Secret; the rest of the spec (scope, targets,
 * time-out, clusters, peer daemon version) as it is.
 */
function jobSpec(spec: ModelPreheatSpec, content: SourceJobContent): ModelPreheatSpec {
  if (content.type === 'image')
    return {
      ...spec,
      source: undefined,
      type: 'image',
      url: content.url,
      imageCredentialsSecretRef: content.credentialsSecretRef,
    };
  return {
    ...spec,
    source: undefined,
    type: 'file',
    urls: content.urls,
    filteredQueryParams: content.filter.length > 0 ? content.filter : undefined,
    // The credentials' tag, only in this spec the job is planned from: never written to the ModelPreheat.
    tag: content.tag,
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
