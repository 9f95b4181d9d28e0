/**
 * One reconcile step of a directory preheat (spec.objectStorage.prefix): every job-sized chunk of the listing gets
 * a manager job of the current attempt (the rest of them, when a creation failed half-way), then the jobs are
 * followed until every one ended. All succeeded: the preheat succeeded. Some failed: the attempt failed, and the
 * retry creates jobs for the failed chunks only. What it decides is directory-decide.ts (pure).
 */
import type { ModelPreheat, ModelPreheatSpec, ModelPreheatStatus } from '../../api/index.ts';
import type { ManagerClient } from '../../manager/client.ts';
import { ManagerError } from '../../manager/errors.ts';
import { isTerminalState, type ManagerJob } from '../../manager/types.ts';
import type { ReconcileContext, ReconcileResult } from '../../runtime/index.ts';
import type { FileSetFile } from '../../storage/fileset.ts';
import type { StorageCredentials } from '../../storage/credentials.ts';
import type { TaskIdRule } from '../../storage/taskid.ts';
import type { SecretReader } from '../secrets.ts';
import { pollDelay, type FailedAttempt } from './decide.ts';
import {
  allEnded,
  chunksToCreate,
  directoryFailedBase,
  directoryFailure,
  directorySucceededStatus,
  failedFiles,
  jobFailed,
  jobsCreatedStatus,
  jobsRunningStatus,
  listedFiles,
  mergedJob,
} from './directory-decide.ts';
import {
  directoryChunks,
  directoryTasks,
  pathsByURL,
  type DirectoryListing,
  type DirectoryListings,
} from './directory.ts';
import { DirectoryChangedError } from './failures.ts';
import { planObjects, ruleOf, storageCredentials } from './request.ts';
import { targetsToPreheat } from './targets.ts';

type Obj = ModelPreheat;
type Status = ModelPreheatStatus;
type Result = Promise<ReconcileResult | void>;

/** What the step shares with the reconciler: its writes, its failure paths and its Events. */
export interface DirectoryStepDeps {
  listings: DirectoryListings;
  secrets: SecretReader;
  /** The task-id rule when the spec names no peer daemon version (the operator's --peer-daemon-version). */
  defaultRule: TaskIdRule;
  poll: { pollBackoffStart: number; pollBackoffMax: number };
  write(obj: Obj, change: (s: Status) => Status, rc: ReconcileContext): Promise<unknown>;
  /** A failed step (listing, signing, manager): reported and retried as the failure allows. */
  fail(obj: Obj, err: unknown, action: string, rc: ReconcileContext): Result;
  /** A failed attempt: retried after the backoff or final. */
  recordFailure(
    obj: Obj,
    spec: ModelPreheatSpec,
    f: FailedAttempt,
    rc: ReconcileContext,
    base: (s: Status) => Status,
  ): Result;
  /** The directory's jobs all succeeded (an Event, a metric). */
  succeeded(obj: Obj, message: string): void;
}

export class DirectoryStep {
  private readonly deps: DirectoryStepDeps;

  constructor(deps: DirectoryStepDeps) {
    this.deps = deps;
  }

  /** Attempt `attempt` of generation `obj.metadata.generation`, one step further. */
  async advance(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    managerURL: string,
    attempt: number,
    rc: ReconcileContext,
  ): Result {
    const gen = obj.metadata.generation;
    const s = obj.status ?? {};
    const jobs = s.jobGeneration === gen ? (s.jobs ?? []) : [];
    const known = s.files?.generation === gen ? s.files : undefined;
    if (!known || chunksToCreate(jobs, known.jobsTotal, attempt).length > 0)
      return this.createJobs(obj, spec, client, managerURL, attempt, jobs, rc);
    return this.pollJobs(obj, spec, client, jobs, known.jobsTotal, rc);
  }

  /** The listing of this generation, checked against the digest status holds of it. */
  private async listing(obj: Obj, spec: ModelPreheatSpec, rc: ReconcileContext): Promise<DirectoryListing> {
    const os = spec.objectStorage!;
    const credentials = () => storageCredentials(os, obj.metadata.namespace!, this.deps.secrets, rc.signal);
    const listing = await this.deps.listings.of(obj, spec, credentials, rc.signal);
    const known = obj.status?.files;
    if (known && known.generation === obj.metadata.generation && known.digest !== listing.digest)
      throw new DirectoryChangedError(
        `the objects under prefix "${os.prefix}" changed since generation ${known.generation} listed them (${known.count} files, digest ${known.digest}; now ${listing.files.length} files, digest ${listing.digest}): a directory's content is fixed per generation, edit the spec to preheat the new content`,
      );
    return listing;
  }

  private async createJobs(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    managerURL: string,
    attempt: number,
    current: NonNullable<Status['jobs']>,
    rc: ReconcileContext,
  ): Result {
    const gen = obj.metadata.generation;
    const where = `prefix "${spec.objectStorage!.prefix}"`;
    let listing: DirectoryListing;
    try {
      listing = await this.listing(obj, spec, rc);
    } catch (err) {
      return this.deps.fail(obj, err, `list ${where}`, rc);
    }
    const chunks = directoryChunks(listing.files);
    const files = listedFiles(gen ?? 0, listing, chunks.length);
    const rule = ruleOf(spec, this.deps.defaultRule);
    const starting = obj.status?.files?.generation !== gen;
    const jobs = [...current];
    let groupID = obj.status?.jobGeneration === gen ? (obj.status?.groupID ?? '') : '';
    const ips = targetsToPreheat(spec, obj.status);
    let created = 0;
    let failure: unknown;
    let credentials: StorageCredentials | undefined;
    try {
      credentials = await storageCredentials(
        spec.objectStorage!,
        obj.metadata.namespace!,
        this.deps.secrets,
        rc.signal,
      );
      for (const k of chunksToCreate(current, chunks.length, attempt)) {
        const bio = `peerload ${obj.metadata.namespace}/${obj.metadata.name} uid=${obj.metadata.uid} generation=${gen} attempt=${attempt} files=${k + 1}/${chunks.length}`;
        const keys = chunks[k]!.map((f) => f.key);
        const plan = await planObjects(spec, keys, credentials, { bio, rule });
        // Targeted peers that hold this content already are not preheated again (as for one object).
        if (ips) plan.request.ips = ips;
        const job = await client.createPreheatJob(plan.request, { signal: rc.signal });
        jobs[k] = { id: job.id, state: job.state, attempt };
        if (created++ === 0) groupID = job.groupID;
      }
    } catch (err) {
      failure = err;
    }
    if (created > 0 || starting) {
      // Without credentials (their Secret failed) no job was created and no task id can be known yet.
      const tasks =
        starting && credentials
          ? directoryTasks(spec, listing.files.slice(0, 100), rule, credentials)
          : undefined;
      const c = {
        jobs,
        created,
        attempt,
        managerURL,
        groupID,
        files,
        tasks: tasks?.map(({ url, taskID }) => ({ url, taskID })),
      };
      // Written before anything else: status is the operator's only memory of the jobs.
      await this.deps.write(obj, (s) => jobsCreatedStatus(s, spec, gen, c, new Date()), rc);
      rc.log.info({ jobs: created, files: listing.files.length, attempt }, 'created directory preheat jobs');
    }
    if (failure !== undefined) return this.deps.fail(obj, failure, `create the preheat jobs of ${where}`, rc);
    return { requeueAfter: this.deps.poll.pollBackoffStart };
  }

  private async pollJobs(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    current: NonNullable<Status['jobs']>,
    total: number,
    rc: ReconcileContext,
  ): Result {
    const gen = obj.metadata.generation;
    const looked = new Map<number, ManagerJob | undefined>();
    const jobs = [...current];
    try {
      for (const [k, j] of current.entries()) {
        if (isTerminalState(j.state)) continue;
        const job = await this.look(client, j.id, rc);
        looked.set(j.id, job);
        jobs[k] = { ...j, state: job?.state ?? 'FAILURE' };
      }
    } catch (err) {
      return this.deps.fail(obj, err, 'poll the preheat jobs', rc);
    }
    if (!allEnded(jobs, total)) {
      if (jobs.some((j, k) => j.state !== current[k]!.state))
        await this.deps.write(obj, (s) => jobsRunningStatus(s, spec, gen, jobs), rc);
      const { pollBackoffStart, pollBackoffMax } = this.deps.poll;
      return { requeueAfter: pollDelay(obj.status?.startedAt, Date.now(), pollBackoffStart, pollBackoffMax) };
    }
    return this.settle(obj, spec, client, jobs, looked, rc);
  }

  /** Every job ended: the preheat succeeded, or this attempt failed (its failed files named). */
  private async settle(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    jobs: NonNullable<Status['jobs']>,
    looked: Map<number, ManagerJob | undefined>,
    rc: ReconcileContext,
  ): Result {
    const gen = obj.metadata.generation;
    const results: ManagerJob[] = [];
    const gone: number[] = [];
    try {
      for (const j of jobs) {
        const job = looked.has(j.id) ? looked.get(j.id) : await this.look(client, j.id, rc);
        if (job) results.push(job);
        else if (j.state !== 'SUCCESS') gone.push(j.id);
      }
    } catch (err) {
      return this.deps.fail(obj, err, 'read the preheat jobs', rc);
    }
    const failedJobs = results.filter(jobFailed);
    const attempt = obj.status?.attempts ?? 1;
    if (failedJobs.length === 0 && gone.length === 0) {
      await this.deps.write(
        obj,
        (s) => directorySucceededStatus(s, spec, gen, jobs, results, new Date()),
        rc,
      );
      const f = obj.status?.files;
      this.deps.succeeded(
        obj,
        `the ${f?.count ?? ''} files of prefix "${spec.objectStorage!.prefix}" preheated in ${jobs.length} job(s) (attempt ${attempt})`,
      );
      return;
    }
    const failed = await this.failedFiles(obj, spec, failedJobs, jobs, rc);
    for (const id of gone)
      failed.push({ path: `(the files of job ${id})`, message: `job ${id} no longer exists on the manager` });
    const failedIDs = new Set([...failedJobs.map((j) => j.id), ...gone]);
    const why = directoryFailure(jobs.length, failedIDs.size, failed);
    const job = results.length > 0 ? mergedJob(results) : undefined;
    return this.deps.recordFailure(obj, spec, { attempt, why, job }, rc, (s) =>
      directoryFailedBase(s, jobs, failedIDs, failed),
    );
  }

  /** The failed files by path: the listing is the kept one, or (after a restart) listed again. */
  private async failedFiles(
    obj: Obj,
    spec: ModelPreheatSpec,
    failedJobs: readonly ManagerJob[],
    jobs: NonNullable<Status['jobs']>,
    rc: ReconcileContext,
  ) {
    let files: readonly FileSetFile[] = [];
    try {
      files = (await this.listing(obj, spec, rc)).files;
    } catch (err) {
      rc.log.warn({ err: (err as Error).message }, 'cannot list the directory to name its failed files');
    }
    const chunks = directoryChunks(files);
    const chunkOf = (id: number) => {
      const k = jobs.findIndex((j) => j.id === id);
      return k >= 0 ? chunks[k] : undefined;
    };
    return failedFiles(failedJobs, pathsByURL(spec.objectStorage!, files), chunkOf);
  }

  /** A job, or undefined when the manager no longer has it. */
  private async look(
    client: ManagerClient,
    id: number,
    rc: ReconcileContext,
  ): Promise<ManagerJob | undefined> {
    try {
      return await client.getJob(id, { signal: rc.signal });
    } catch (err) {
      if (err instanceof ManagerError && err.kind === 'notFound') return undefined;
      throw err;
    }
  }
}
