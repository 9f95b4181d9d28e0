/**
 * What a directory preheat decides, as pure functions: which of the listing's job-sized chunks need a job in this
 * attempt, what the jobs say together, which files failed, and each status the step writes. The status stays
 * bounded whatever the directory's size: counts, bytes, jobs done of total, the first failed files by path, one
 * id and state per job (at most 100 jobs).
 */
import {
  MAX_LISTED_FILES,
  type DirectoryJob,
  type DirectoryStatus,
  type ModelPreheatSpec,
  type ModelPreheatStatus,
} from '../../api/index.ts';
import { isTerminalState, jobPeerTasks, type JobState, type ManagerJob } from '../../manager/types.ts';
import { redactBounded, redactURL } from '../../redact.ts';
import type { FileSetFile } from '../../storage/fileset.ts';
import { PreheatReason } from './conditions.ts';
import { emptySuccess, observed } from './decide.ts';
import { peerResults, failureText } from './results.ts';
import { carriedPeers, contentKey, targetOutcomes } from './targets.ts';

type Status = ModelPreheatStatus;

type AttemptJob = DirectoryJob;

/**
 * The chunks (by index) that need a job of attempt `attempt`: those without a job, and those whose job of an earlier
 * attempt did not succeed. A job of this attempt is never created twice.
 */
export function chunksToCreate(jobs: readonly AttemptJob[], total: number, attempt: number): number[] {
  const out: number[] = [];
  for (let k = 0; k < total; k++) {
    const j = jobs[k];
    if (!j || ((j.attempt ?? 0) < attempt && j.state !== 'SUCCESS')) out.push(k);
  }
  return out;
}

/** The resource's job state while its jobs run: PENDING until one has started, then STARTED. */
export function runningState(jobs: readonly DirectoryJob[]): JobState {
  return jobs.some((j) => j.state !== 'PENDING') ? 'STARTED' : 'PENDING';
}

/** Whether every chunk has a job and every job ended. */
export const allEnded = (jobs: readonly DirectoryJob[], total: number): boolean =>
  jobs.length >= total && jobs.every((j) => isTerminalState(j.state));

/** A job that failed, or that the manager calls SUCCESS while no peer reported its content (emptySuccess). */
export function jobFailed(job: ManagerJob): boolean {
  return job.state === 'FAILURE' || (job.state === 'SUCCESS' && emptySuccess(job) !== undefined);
}

/**
 * One ManagerJob holding every job's results, for what status says of peers and targets: a peer counts as holding
 * the directory where it succeeded in some job and failed in none.
 */
export function mergedJob(jobs: readonly ManagerJob[]): ManagerJob {
  const first = jobs[0]!;
  return {
    ...first,
    result: { jobStates: jobs.flatMap((j) => j.result?.jobStates ?? []) },
  };
}

/** A failed file, for status. */
export interface FailedFile {
  path: string;
  message: string;
}

/**
 * The files of failed jobs: each failure a peer reported for a URL (named by path, `pathOf` the lookup), and for a
 * job that failed without naming URLs, every file it carried (`chunkOf`, when the listing is known) with the job's
 * words. Whole list; status keeps the first few.
 */
export function failedFiles(
  failed: readonly ManagerJob[],
  pathOf: (url: string) => string | undefined,
  chunkOf: (jobID: number) => readonly FileSetFile[] | undefined,
): FailedFile[] {
  const out: FailedFile[] = [];
  for (const job of failed) {
    const { failure } = jobPeerTasks(job);
    if (failure.length > 0) {
      const seen = new Set<string>();
      for (const t of failure) {
        const path = pathOf(t.url) ?? redactURL(t.url);
        if (seen.has(path)) continue;
        seen.add(path);
        out.push({ path, message: redactBounded(t.description ?? 'failed', 512) });
      }
      continue;
    }
    const why = redactBounded(
      (job.state === 'SUCCESS' ? emptySuccess(job) : undefined) ?? failureText(job),
      512,
    );
    const files = chunkOf(job.id);
    if (files) out.push(...files.map((f) => ({ path: f.path, message: why })));
    else out.push({ path: `(the files of job ${job.id})`, message: why });
  }
  return out;
}

/** status.files as listed for generation `gen`. */
export function listedFiles(
  gen: number,
  listing: { files: readonly FileSetFile[]; bytes: number; digest: string },
  jobsTotal: number,
): DirectoryStatus {
  return {
    generation: gen,
    count: listing.files.length,
    bytes: listing.bytes,
    digest: listing.digest,
    jobsTotal,
    jobsSucceeded: 0,
  };
}

const where = (spec: ModelPreheatSpec) => `prefix "${spec.objectStorage?.prefix ?? ''}"`;

/** What one created batch of jobs is, for its status. */
export interface CreatedJobs {
  /** Every job of this generation after the creation, in chunk order. */
  jobs: AttemptJob[];
  /** How many were created now. */
  created: number;
  attempt: number;
  managerURL: string;
  groupID: string;
  files: DirectoryStatus;
  /** The first files' task ids (status.tasks), set when the generation starts. */
  tasks?: { url: string; taskID: string }[] | undefined;
}

/** `s` once the jobs of an attempt (or the rest of them) are created; a new attempt clears the last results. */
export function jobsCreatedStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  c: CreatedJobs,
  now: Date,
): Status {
  const key = contentKey(spec);
  const carried = carriedPeers(s, key);
  const fresh = s.jobGeneration !== gen || s.attempts !== c.attempt;
  const base: Status = {
    ...s,
    // A source's resolution belongs to the source's generations only.
    source: undefined,
    contentKey: key,
    peers: carried.length > 0 ? carried : undefined,
    state: runningState(c.jobs),
    jobID: c.jobs[0]?.id,
    groupID: c.groupID,
    managerURL: c.managerURL,
    jobGeneration: gen,
    attempts: c.attempt,
    jobs: c.jobs,
    files: { ...c.files, jobsSucceeded: c.jobs.filter((j) => j.state === 'SUCCESS').length },
    ...(c.tasks ? { tasks: c.tasks.slice(0, 100) } : {}),
    ...(fresh
      ? {
          startedAt: now.toISOString(),
          completedAt: undefined,
          nextRetryAt: undefined,
          successCount: undefined,
          failureCount: undefined,
          successTasks: undefined,
          failureTasks: undefined,
        }
      : {}),
  };
  return observed(base, gen, {
    outcome: 'Progressing',
    reason: PreheatReason.JobCreated,
    message: `${c.created} preheat job(s) created on ${c.managerURL} for the ${c.files.count} files of ${where(spec)} (${c.jobs.length} of ${c.files.jobsTotal} jobs exist), attempt ${c.attempt} of ${spec.retry.limit + 1}`,
  });
}

/** `s` while the jobs run: their states, and how many succeeded. */
export function jobsRunningStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  jobs: readonly AttemptJob[],
): Status {
  const done = jobs.filter((j) => j.state === 'SUCCESS').length;
  const total = s.files?.jobsTotal ?? jobs.length;
  return observed(
    {
      ...s,
      state: runningState(jobs),
      jobs: [...jobs],
      ...(s.files ? { files: { ...s.files, jobsSucceeded: done } } : {}),
    },
    gen,
    {
      outcome: 'Progressing',
      reason: PreheatReason.JobRunning,
      message: `${done} of ${total} preheat jobs of ${where(spec)} succeeded, attempt ${s.attempts ?? 1} of ${spec.retry.limit + 1}`,
    },
  );
}

/** `s` once every job succeeded. */
export function directorySucceededStatus(
  s: Status,
  spec: ModelPreheatSpec,
  gen: number | undefined,
  jobs: readonly AttemptJob[],
  results: readonly ManagerJob[],
  now: Date,
): Status {
  const merged = mergedJob(results);
  const peers = peerResults(merged);
  const files = s.files
    ? { ...s.files, jobsSucceeded: jobs.length, failedCount: undefined, failed: undefined }
    : undefined;
  return observed(
    {
      ...s,
      ...peers,
      ...targetOutcomes(spec, s, merged),
      state: 'SUCCESS',
      completedAt: now.toISOString(),
      jobs: [...jobs],
      ...(files ? { files } : {}),
    },
    gen,
    {
      outcome: 'Succeeded',
      reason: PreheatReason.JobSucceeded,
      message:
        `the ${files?.count ?? '?'} files of ${where(spec)} (${files?.bytes ?? '?'} bytes) preheated in ${jobs.length} job(s) (${peers.successCount} peer download(s))` +
        (peers.failureCount ? `, ${peers.failureCount} failed` : ''),
    },
  );
}

/**
 * The status an attempt with failed jobs starts from (the caller's failedStatus adds the retry or the final
 * failure): the jobs' states (an empty success counts as FAILURE, so its chunk is retried) and the failed files.
 */
export function directoryFailedBase(
  s: Status,
  jobs: readonly AttemptJob[],
  failedIDs: ReadonlySet<number>,
  failed: readonly FailedFile[],
): Status {
  const marked = jobs.map((j) => (failedIDs.has(j.id) ? { ...j, state: 'FAILURE' as const } : j));
  return {
    ...s,
    jobs: marked,
    ...(s.files
      ? {
          files: {
            ...s.files,
            jobsSucceeded: marked.filter((j) => j.state === 'SUCCESS').length,
            failedCount: failed.length,
            failed: failed.slice(0, MAX_LISTED_FILES),
          },
        }
      : {}),
  };
}

/** The words of an attempt with failed jobs. */
export function directoryFailure(total: number, failedJobs: number, failed: readonly FailedFile[]): string {
  const first = failed[0];
  return (
    `${failedJobs} of ${total} preheat job(s) failed, ${failed.length} file(s)` +
    (first ? ` (first: ${first.path}: ${first.message})` : '')
  );
}
