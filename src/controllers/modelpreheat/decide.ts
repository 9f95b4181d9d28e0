/**
 * What the ModelPreheat reconciler decides, as pure functions of the object, its parsed spec and the time: the next
 * step of the state machine, the finalizer, the requeue and retry policy and each status the reconciler writes.
 * The reconciler does the I/O (manager, apiserver, Events); everything it chooses is here, unit-tested case by case.
 */
import { retryAfterDelay } from '../../http/retry.ts';
import {
  parseDuration,
  type ModelPreheat,
  type ModelPreheatSpec,
  type ModelPreheatStatus,
  type PreheatSourceStatus,
} from '../../api/index.ts';
import { getCondition, type ReconcileResult } from '../../runtime/index.ts';
import type { ManagerJob } from '../../manager/types.ts';
import { CACHE_FINALIZER_NEEDED } from './cache.ts';
import {
  PreheatCondition,
  PreheatReason,
  preheatConditions,
  preheatPhase,
  withPreheatConditions,
  type PreheatConditionReason,
  type PreheatObservation,
  type PreheatOutcome,
} from './conditions.ts';
import type { FailureView } from './failures.ts';
import { sourceRefreshed } from './source.ts';
import { peerResults } from './results.ts';
import { carriedPeers, contentKey, targetOutcomes, targetsToPreheat } from './targets.ts';

type Status = ModelPreheatStatus;

/** The longest wait between two attempts, whatever `spec.retry.backoff` and the attempt number say. */
export const MAX_RETRY_DELAY_MS = 3_600_000;

/**
 * The next step for a ModelPreheat whose spec is valid and which is not being deleted:
 * - `cache`: this generation's job succeeded; what is left is its `status.cache` (cache.ts);
 * - `done`: a final failure of this generation; only a spec edit (a new generation) starts over;
 * - `alreadyPreheated`: every targeted peer holds this content already, so no job is needed;
 * - `create`: send attempt `attempt` of this generation's job;
 * - `wait`: the last attempt failed and its retry is not due for `ms`;
 * - `poll`: a job of this generation is running: look at it.
 */
export type PreheatStep =
  | { kind: 'cache' }
  | { kind: 'done' }
  | { kind: 'alreadyPreheated' }
  | { kind: 'create'; attempt: number }
  | { kind: 'wait'; ms: number }
  | { kind: 'poll'; job: Status };

export function nextStep(obj: ModelPreheat, spec: ModelPreheatSpec, now: number): PreheatStep {
  const gen = obj.metadata.generation;
  const status = obj.status;
  // A new value of the refresh annotation: the source is resolved again and what it finds preheated.
  if (sourceRefreshed(obj, spec)) return { kind: 'create', attempt: 1 };
  // The job of the current generation, if one was created; a new generation starts over.
  const job = status?.jobGeneration === gen && status?.state !== undefined ? status : undefined;
  if (job?.state === 'SUCCESS') return { kind: 'cache' };
  if (job?.state === 'FAILURE' && (job.attempts ?? 1) > spec.retry.limit) return { kind: 'done' };
  // A final failure stays final for this generation (a resync or restart must not re-send a request the manager
  // rejected). Only the operator's own configuration can change under it: ManagerNotConfigured is looked at again.
  const succeeded = getCondition(status?.conditions, PreheatCondition.Succeeded);
  if (
    succeeded?.status === 'False' &&
    succeeded.observedGeneration === gen &&
    succeeded.reason !== 'ManagerNotConfigured'
  ) {
    return { kind: 'done' };
  }
  if (!job) {
    // Targeted peers that hold this content already are not preheated again (a ServedModel scaling out).
    return targetsToPreheat(spec, status)?.length === 0
      ? { kind: 'alreadyPreheated' }
      : { kind: 'create', attempt: 1 };
  }
  if (job.state === 'FAILURE') {
    const wait = Date.parse(job.nextRetryAt ?? '') - now;
    return wait > 0 ? { kind: 'wait', ms: wait } : { kind: 'create', attempt: (job.attempts ?? 1) + 1 };
  }
  return { kind: 'poll', job };
}

/** Whether the finalizer must be added or removed: it is needed to delete the job record or to evict the cache. */
export function finalizerChange(spec: ModelPreheatSpec, has: boolean): 'add' | 'remove' | undefined {
  const needed = spec.deleteJobOnCleanup || CACHE_FINALIZER_NEEDED(spec);
  if (needed && !has) return 'add';
  if (!needed && has) return 'remove';
  return undefined;
}

/**
 * When to look at a running job again: half its age, within [start, max], so a long job is polled less often.
 * Computed from `status.startedAt`, so the schedule survives an operator restart.
 */
export function pollDelay(startedAt: string | undefined, now: number, start: number, max: number): number {
  const age = now - (startedAt ? Date.parse(startedAt) : now);
  return Math.min(max, Math.max(start, age / 2));
}

/** The wait before attempt `attempt + 1`: `spec.retry.backoff` doubled per failed attempt, bounded. */
export function retryDelay(backoff: string, attempt: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, parseDuration(backoff) * 2 ** (attempt - 1));
}

/** `s` with the phase and conditions of what was observed (conditions.ts decides them) about generation `gen`. */
export function observed(
  s: Status,
  gen: number | undefined,
  o: Omit<PreheatObservation, 'jobState'>,
): Status {
  const observation = { ...o, jobState: s.jobGeneration === gen ? s.state : undefined };
  return withPreheatConditions(
    { ...s, phase: preheatPhase(observation) },
    gen,
    preheatConditions(observation),
  );
}

/** Every targeted peer holds the content already: success without a job. */
export function alreadyPreheatedStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  now: Date,
) {
  const count = spec.targets?.ips?.length ?? 0;
  return observed(
    {
      ...s,
      contentKey: contentKey(spec),
      state: 'SUCCESS',
      jobGeneration: gen,
      attempts: 0,
      completedAt: now.toISOString(),
      nextRetryAt: undefined,
    },
    gen,
    {
      outcome: 'Succeeded',
      reason: PreheatReason.AlreadyPreheated,
      message: `all ${count} targeted peer(s) hold the content already: no job needed`,
    },
  );
}

/** What a new job is, for its status. */
export interface CreatedJob {
  job: ManagerJob;
  managerURL: string;
  attempt: number;
  /** Per URL, the task id the peers compute (request.ts); never a signed URL. */
  tasks: { url: string; taskID: string }[];
  /** A source's content key (with the commit it resolved to) and what it resolved to (hub.ts). */
  contentKey?: string | undefined;
  source?: PreheatSourceStatus | undefined;
}

/** `s` as the start of a new job: the previous job's results cleared, the peers of the same content carried. */
export function startedStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  c: CreatedJob,
  now: Date,
): Status {
  const key = c.contentKey ?? contentKey(spec);
  const carried = carriedPeers(s, key);
  return {
    ...s,
    source: c.source,
    contentKey: key,
    peers: carried.length > 0 ? carried : undefined,
    state: c.job.state,
    jobID: c.job.id,
    groupID: c.job.groupID,
    managerURL: c.managerURL,
    jobGeneration: gen,
    attempts: c.attempt,
    startedAt: now.toISOString(),
    completedAt: undefined,
    nextRetryAt: undefined,
    tasks: c.tasks.length > 0 ? c.tasks.slice(0, 100) : undefined,
    // A directory's jobs and listing belong to the directory's generations only.
    files: undefined,
    jobs: undefined,
    successCount: undefined,
    failureCount: undefined,
    successTasks: undefined,
    failureTasks: undefined,
  };
}

/** The status of a job just created and not finished at its first look. */
export function jobCreatedStatus(s: Status, spec: ModelPreheatSpec, gen: number | undefined, c: CreatedJob) {
  return observed(s, gen, {
    outcome: 'Progressing',
    reason: PreheatReason.JobCreated,
    message: `preheat job ${c.job.id} (${c.job.groupID}) created on ${c.managerURL}, attempt ${c.attempt} of ${spec.retry.limit + 1}`,
  });
}

/** A running job whose state changed. */
export function jobRunningStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  job: ManagerJob,
  attempt: number,
) {
  return observed({ ...s, state: job.state }, gen, {
    outcome: 'Progressing',
    reason: PreheatReason.JobRunning,
    message: `preheat job ${job.id} is ${job.state}, attempt ${attempt} of ${spec.retry.limit + 1}`,
  });
}

/**
 * A job the manager calls SUCCESS although no peer reported the content is a failure: the manager ends a preheat
 * of a URL its seed peer could not fetch (an origin 404 or 403, scope single_seed_peer) SUCCESS with no success
 * and no failure tasks, and only the scheduler's log says why. The words of that failure, else undefined.
 */
export function emptySuccess(job: ManagerJob): string | undefined {
  const peers = peerResults(job);
  if (peers.successCount > 0) return undefined;
  return (
    `job ${job.id} ended SUCCESS but no peer reported the content (${peers.failureCount} failed): ` +
    'the seed peer could not fetch it — check that the URL exists and that its credentials are valid'
  );
}

/** `s` (as `base` makes it: with the new job when it finished at once) after a successful job. */
export function succeededStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  job: ManagerJob,
  now: Date,
): Status {
  const peers = peerResults(job);
  return observed(
    { ...s, state: 'SUCCESS', completedAt: now.toISOString(), ...peers, ...targetOutcomes(spec, s, job) },
    gen,
    {
      outcome: 'Succeeded',
      reason: PreheatReason.JobSucceeded,
      message:
        `preheat job ${job.id} succeeded on ${peers.successCount} peer(s)` +
        (peers.failureCount ? `, failed on ${peers.failureCount}` : ''),
    },
  );
}

/** One failed attempt of a job. */
export interface FailedAttempt {
  attempt: number;
  why: string;
  /** The job, when the manager still knows it. */
  job?: ManagerJob | undefined;
  reason?: PreheatConditionReason;
}

/** Whether attempt `attempt` was the last one `spec.retry.limit` allows. */
export const exhausted = (spec: ModelPreheatSpec, attempt: number): boolean => attempt > spec.retry.limit;

/**
 * `s` after a failed attempt: final (FAILURE, Stalled) when the retries are exhausted, else a retry scheduled
 * `retryDelay` from `now` (nextRetryAt in status, so a restart keeps the schedule).
 */
export function failedStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  f: FailedAttempt,
  now: Date,
): Status {
  const peers = f.job ? peerResults(f.job) : {};
  const base = { ...s, ...targetOutcomes(spec, s, f.job, f.why), ...peers, state: 'FAILURE' as const };
  if (exhausted(spec, f.attempt)) {
    return observed({ ...base, completedAt: now.toISOString(), nextRetryAt: undefined }, gen, {
      outcome: 'Failed',
      reason: f.reason ?? PreheatReason.JobFailed,
      message: `preheat failed after ${f.attempt} attempt(s): ${f.why}`,
    });
  }
  const delay = retryDelay(spec.retry.backoff, f.attempt);
  return observed({ ...base, nextRetryAt: new Date(now.getTime() + delay).toISOString() }, gen, {
    outcome: 'Progressing',
    reason: PreheatReason.JobFailedWillRetry,
    message: `attempt ${f.attempt} of ${spec.retry.limit + 1} failed: ${f.why}; retrying in ${Math.round(delay / 1000)}s`,
  });
}

/** What a failed step (not a failed job) says in the conditions: final, blocked on a change, or still open. */
export function failureOutcome(view: FailureView): PreheatOutcome {
  return view.final ? 'Failed' : view.blocked ? 'Blocked' : 'Progressing';
}

/** What a failed step asks of the queue: nothing, a requeue after the given delay, or its backoff (`throw`). */
export function failureRequeue(
  view: FailureView,
  poll?: { pollBackoffStart: number; pollBackoffMax: number },
): ReconcileResult | 'throw' | undefined {
  switch (view.retry.kind) {
    case 'none':
      return undefined;
    case 'after':
      // A manager's Retry-After of 0 would poll it at once, one of a year would leave the object unobserved.
      return {
        requeueAfter: view.retry.fromServer && poll ? retryAfterDelay(view.retry.ms, poll) : view.retry.ms,
      };
    case 'backoff':
      return 'throw';
  }
}
