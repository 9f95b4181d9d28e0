/**
 * The ModelPreheat reconciler: one manager preheat job per generation of the spec, followed to SUCCESS or
 * FAILURE, retried with backoff up to `spec.retry.limit`, reported in status, conditions and Events.
 *
 * Status is the memory: the job id is written before anything depends on it, so an operator restart continues
 * polling the same job. A crash between "job created" and "status written" leaves one extra job on the manager
 * when the next reconcile creates it again; preheating the same URLs twice is harmless (the second job finds the
 * content cached) and each job carries the resource in its `bio` to be traced.
 *
 * `reconcile` is the state machine; what it decides (next step, statuses, delays) is in decide.ts, pure.
 */
import { ModelPreheatSpec, GVR, type ModelPreheat, type ModelPreheatStatus } from '../../api/index.ts';
import type { ManagerClient } from '../../manager/client.ts';
import { ManagerError } from '../../manager/errors.ts';
import type { ManagerJob } from '../../manager/types.ts';
import {
  addFinalizer,
  hasFinalizer,
  isBeingDeleted,
  removeFinalizer,
  type ControllerContext,
  type Informer,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import {
  ManagerClients,
  ReachDeniedError,
  managerReach,
  resolveManager,
  useClusterManagers,
} from '../managers.ts';
import { preheatCredentialReach } from '../../policy/storage-reach.ts';
import { operatorSources, type ModelSources } from '../../sources/index.ts';
import type { Reach } from '../../policy/reach.ts';
import { operatorMetrics, type OperatorMetrics } from '../metrics.ts';
import { SecretReader } from '../secrets.ts';
import {
  CACHE_BEHIND_RETRY_MS,
  cacheBehind,
  invalidSpec,
  specProblem,
  statusWriter,
  type StatusWrite,
} from '../status.ts';
import { cacheStep, type CacheDeps } from './cache.ts';
import { FINALIZER, cleanUp } from './cleanup.ts';
import { PreheatReason } from './conditions.ts';
import {
  alreadyPreheatedStatus,
  emptySuccess,
  exhausted,
  failedStatus,
  failureOutcome,
  failureRequeue,
  finalizerChange,
  jobCreatedStatus,
  jobRunningStatus,
  nextStep,
  observed,
  pollDelay,
  retryDelay,
  startedStatus,
  succeededStatus,
  type CreatedJob,
  type FailedAttempt,
} from './decide.ts';
import { DirectoryListings, isDirectory } from './directory.ts';
import { DirectoryStep } from './directory-step.ts';
import { describeFailure } from './failures.ts';
import { SourcePreheats, SourceJobError } from './source.ts';
import { planPreheat, ruleOf, type PreheatPlan } from './request.ts';
import { failureText } from './results.ts';
import { contentKey, targetsToPreheat } from './targets.ts';

type Obj = ModelPreheat;
type Status = ModelPreheatStatus;
type Result = Promise<ReconcileResult | void>;
type Manager = { client: ManagerClient; url: string };

/** Bound of the one look at a new job before its first status write (see createJob). */
const FIRST_LOOK_TIMEOUT_MS = 2_000;
/** Polls of a running job ask for the manager's credentials each time: a rotated Secret is seen within 30 s. */
const SECRET_TTL_MS = 30_000;

export class ModelPreheatReconciler {
  readonly informer: Informer<Obj>;
  private readonly ctx: ControllerContext;
  private readonly secrets: SecretReader;
  private readonly clients = new ManagerClients();
  private readonly metrics: OperatorMetrics;
  private readonly writeStatus: StatusWrite<Obj, Status>;
  /** What the cache and clean-up steps share with the reconciler. */
  private readonly cacheDeps: CacheDeps;
  /** The jobs of a directory (spec.objectStorage.prefix), with its listing per generation. */
  private readonly directory: DirectoryStep;
  /** The model sources (src/sources): where their credentials may go, and what a spec.source resolves to. */
  private readonly sources: ModelSources;
  /** A spec.source's job per generation. */
  private readonly sourceJobs: SourcePreheats;

  constructor(ctx: ControllerContext) {
    this.ctx = ctx;
    this.informer = ctx.informers.get<Obj>(GVR.modelPreheats);
    // ClusterManagers for resolveManager; the ServedModels for evictOnDelete's check that no other resource still
    // uses a task (policy/shared-tasks.ts).
    useClusterManagers(ctx);
    ctx.informers.get(GVR.servedModels);
    this.secrets = new SecretReader(ctx.kube, { ttlMs: SECRET_TTL_MS });
    this.metrics = operatorMetrics(ctx.metrics);
    this.writeStatus = statusWriter<Obj, Status>(ctx, GVR.modelPreheats);
    const listings = new DirectoryListings();
    this.sources = operatorSources(ctx.config, {
      secretData: (namespace, name, signal) => this.secrets.data(namespace, name, signal),
      secretValue: (namespace, ref, signal) => this.secrets.value(namespace, ref, signal),
    });
    this.sourceJobs = new SourcePreheats(this.sources, this.secrets);
    this.cacheDeps = {
      ctx,
      secrets: this.secrets,
      clients: this.clients,
      writeStatus: this.writeStatus,
      listings,
    };
    this.directory = new DirectoryStep({
      listings,
      secrets: this.secrets,
      defaultRule: ctx.config.peerDaemonVersion,
      poll: ctx.config,
      write: (obj, change, rc) => this.write(obj, change, rc),
      fail: (obj, err, action, rc) => this.fail(obj, err, action, rc),
      recordFailure: (obj, spec, f, rc, base) => this.recordFailure(obj, spec, f, rc, base),
      succeeded: (obj, message) => {
        this.ctx.events.record(obj, 'Normal', 'JobSucceeded', message);
        this.metrics.preheatJobs.labels('succeeded').inc();
      },
    });
  }

  async reconcile(key: string, rc: ReconcileContext): Result {
    const cached = this.informer.get(key);
    if (!cached) {
      // Deleted: nothing else is kept per resource.
      this.sourceJobs.forget(key);
      return this.cacheDeps.listings.forget(key);
    }
    // A requeue that outran the watch of our last write waits for it (it would create a second job).
    if (cacheBehind(this.ctx.status, cached)) return { requeueAfter: CACHE_BEHIND_RETRY_MS };

    const parsed = ModelPreheatSpec.safeParse(cached.spec);
    if (!parsed.success) return this.reportInvalidSpec(cached, specProblem(parsed.error), rc);
    const spec = parsed.data;
    const denied = await this.reachDenied(cached, spec, rc);
    if (denied) return denied.result;

    if (isBeingDeleted(cached)) return cleanUp(this.cacheDeps, cached, spec, rc);
    const obj = await this.keepFinalizer(cached, spec, rc);

    // Where this generation stands, from status alone (decide.ts).
    const step = nextStep(obj, spec, Date.now());
    if (step.kind === 'cache') return cacheStep(this.cacheDeps, obj, spec, rc);
    if (step.kind === 'done') return;

    // Every other step needs the manager: its configuration is checked (and reported) before anything waits.
    let manager: Manager;
    try {
      manager = await this.manager(obj, spec, rc);
    } catch (err) {
      return this.fail(obj, err, 'resolve the manager', rc);
    }
    const { client, url: managerURL } = manager;

    switch (step.kind) {
      case 'alreadyPreheated':
        await this.write(
          obj,
          (s) => alreadyPreheatedStatus(s, spec, obj.metadata.generation, new Date()),
          rc,
        );
        return;
      case 'wait':
        return { requeueAfter: step.ms };
      case 'create':
        if (isDirectory(spec)) return this.directory.advance(obj, spec, client, managerURL, step.attempt, rc);
        return this.createJob(obj, spec, client, managerURL, step.attempt, rc);
      case 'poll':
        if (isDirectory(spec))
          return this.directory.advance(obj, spec, client, managerURL, step.job.attempts ?? 1, rc);
        return this.pollJob(obj, spec, client, step.job, rc);
    }
  }

  /** The manager of `spec.manager` (else the operator's default), with its credentials read now. */
  private async manager(obj: Obj, spec: ModelPreheatSpec, rc: ReconcileContext): Promise<Manager> {
    const { namespace } = obj.metadata;
    const resolved = await resolveManager(spec.manager, namespace!, this.ctx.config, this.secrets, rc.signal);
    return { client: this.clients.get(resolved), url: resolved.url };
  }

  /**
   * A manager, storage host or registry the admin did not allow (policy/) is never contacted, not even to clean up on delete: the
   * finalizer goes with a CleanupSkipped Event, and the object is Stalled naming the rule.
   */
  private async reachDenied(
    obj: Obj,
    spec: ModelPreheatSpec,
    rc: ReconcileContext,
  ): Promise<{ result: ReconcileResult | void } | undefined> {
    const managerAllowed = await managerReach(spec.manager, obj.metadata.namespace!, this.ctx.config);
    const reach = managerAllowed.allowed ? this.credentialReach(obj, spec) : managerAllowed;
    if (reach.allowed) return undefined;
    const denied = new ReachDeniedError(reach.reason, reach.message);
    const problem = { finalizer: FINALIZER, message: reach.message, skipped: 'manager not contacted' };
    let result: ReconcileResult | void = undefined;
    const report = async () => {
      result = await this.fail(obj, denied, 'use the manager', rc);
    };
    await invalidSpec(this.ctx, GVR.modelPreheats, obj, problem, report, rc.signal);
    return { result };
  }

  /**
   * Where the spec's credentials would go: a store, a registry, or a Hub's token (asked before its Secret is read;
   * deletion reads no token, so a refused Hub does not keep the manager from cleaning up).
   */
  private credentialReach(obj: Obj, spec: ModelPreheatSpec): Reach {
    if (spec.source && !isBeingDeleted(obj)) return this.sources.reach(spec.source);
    return preheatCredentialReach(spec, this.ctx.config);
  }

  private reportInvalidSpec(obj: Obj, message: string, rc: ReconcileContext): Promise<void> {
    const problem = { finalizer: FINALIZER, message, skipped: 'job not deleted' };
    const gen = obj.metadata.generation;
    const report = () =>
      this.write(
        obj,
        (s) => observed(s, gen, { outcome: 'Failed', reason: PreheatReason.InvalidSpec, message }),
        rc,
      );
    return invalidSpec(this.ctx, GVR.modelPreheats, obj, problem, report, rc.signal);
  }

  /**
   * The object as the finalizer patch left it: the pass's status write is based on it (on the older one it would be
   * a conflict), and the status writer knows of the patch, so the cache holding the older object counts as behind.
   */
  private async keepFinalizer(obj: Obj, spec: ModelPreheatSpec, rc: ReconcileContext): Promise<Obj> {
    const { kube, status } = this.ctx;
    const change = finalizerChange(spec, hasFinalizer(obj, FINALIZER));
    if (change === undefined) return obj;
    const patched =
      change === 'add'
        ? await addFinalizer(kube, GVR.modelPreheats, obj, FINALIZER, rc.signal)
        : await removeFinalizer(kube, GVR.modelPreheats, obj, FINALIZER, rc.signal);
    if (patched !== obj) status.wrote(obj, patched);
    return patched;
  }

  private write(obj: Obj, change: (s: Status) => Status, rc: ReconcileContext) {
    return this.writeStatus(obj, change, rc.signal);
  }

  private async createJob(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    managerURL: string,
    attempt: number,
    rc: ReconcileContext,
  ): Result {
    const gen = obj.metadata.generation;
    let created: CreatedJob;
    try {
      const bio = `peerload ${obj.metadata.namespace}/${obj.metadata.name} uid=${obj.metadata.uid} generation=${gen} attempt=${attempt}`;
      const plan = await this.plan(obj, spec, bio, rc.signal);
      const ips = targetsToPreheat(spec, obj.status);
      if (ips) plan.request.ips = ips;
      created = {
        job: await client.createPreheatJob(plan.request, { signal: rc.signal }),
        managerURL,
        attempt,
        tasks: plan.tasks,
        contentKey: plan.contentKey,
        source: plan.source,
      };
    } catch (err) {
      const record = err instanceof SourceJobError ? err.record : undefined;
      return this.fail(obj, err, 'create the preheat job', rc, record);
    }
    rc.log.info({ jobID: created.job.id, groupID: created.job.groupID, attempt }, 'created preheat job');
    const started = (s: Status) => startedStatus(s, spec, gen, created, new Date());
    // One look at the job before the first status write: a job the seed peers finish at once (the task is already
    // cached, or a small file) then costs one status write instead of two, and in a burst of preheats the apiserver's
    // writes are what bounds the rate. The look is a single attempt with a short bound, so the job id (status is the
    // operator's only memory of the job) is never left unwritten for long; any other answer is left to polling.
    const first = await client
      .getJob(created.job.id, { timeoutMs: FIRST_LOOK_TIMEOUT_MS, signal: rc.signal })
      .catch(() => undefined);
    if (first?.state === 'SUCCESS') return this.succeed(obj, spec, started, first, attempt, rc);

    await this.write(obj, (s) => jobCreatedStatus(started(s), spec, gen, created), rc);
    // No Event here: the condition (reason JobCreated) says it, and with many resources an Event per job creation
    // would be a large share of the apiserver writes. Outcomes (JobSucceeded, JobFailed...) get Events.
    return { requeueAfter: this.ctx.config.pollBackoffStart };
  }

  /** The job of the spec: its URLs, or a source's (source.ts) as of this generation's resolution. */
  private plan(
    obj: Obj,
    spec: ModelPreheatSpec,
    bio: string,
    signal: AbortSignal,
  ): Promise<PreheatPlan & Partial<Pick<CreatedJob, 'contentKey' | 'source'>>> {
    const rule = this.ctx.config.peerDaemonVersion;
    if (spec.source) return this.sourceJobs.plan(obj, spec, bio, ruleOf(spec, rule), contentKey, signal);
    return planPreheat(spec, obj.metadata.namespace!, this.secrets, { bio }, new Date(), signal, rule);
  }

  /** Records a successful job; `base` carries what else this same write must say (the job itself, when new). */
  private async succeed(
    obj: Obj,
    spec: ModelPreheatSpec,
    base: (s: Status) => Status,
    job: ManagerJob,
    attempt: number,
    rc: ReconcileContext,
  ): Result {
    const why = emptySuccess(job);
    if (why)
      return this.recordFailure(
        obj,
        spec,
        { attempt, why, job, reason: PreheatReason.NoPeerSucceeded },
        rc,
        base,
      );
    await this.write(
      obj,
      (s) => succeededStatus(base(s), spec, obj.metadata.generation, job, new Date()),
      rc,
    );
    this.ctx.events.record(
      obj,
      'Normal',
      'JobSucceeded',
      `preheat job ${job.id} succeeded (attempt ${attempt})`,
    );
    this.metrics.preheatJobs.labels('succeeded').inc();
  }

  private async pollJob(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    current: Status,
    rc: ReconcileContext,
  ): Result {
    const attempt = current.attempts ?? 1;
    let job: ManagerJob;
    try {
      job = await client.getJob(current.jobID!, { signal: rc.signal });
    } catch (err) {
      if (!(err instanceof ManagerError && err.kind === 'notFound'))
        return this.fail(obj, err, `poll preheat job ${current.jobID}`, rc);
      this.metrics.managerErrors.labels(err.kind).inc();
      // The record was deleted on the manager: the outcome is unknowable, so count it as a failed attempt.
      return this.recordFailure(
        obj,
        spec,
        { attempt, why: `job ${current.jobID} no longer exists on the manager` },
        rc,
      );
    }

    if (job.state === 'SUCCESS') return this.succeed(obj, spec, (s) => s, job, attempt, rc);
    if (job.state === 'FAILURE')
      return this.recordFailure(obj, spec, { attempt, why: failureText(job), job }, rc);
    if (job.state !== current.state)
      await this.write(obj, (s) => jobRunningStatus(s, spec, obj.metadata.generation, job, attempt), rc);
    const { pollBackoffStart, pollBackoffMax } = this.ctx.config;
    return { requeueAfter: pollDelay(current.startedAt, Date.now(), pollBackoffStart, pollBackoffMax) };
  }

  /** A failed attempt of the job: retried after the backoff, or final once `spec.retry.limit` is used up. */
  private async recordFailure(
    obj: Obj,
    spec: ModelPreheatSpec,
    f: FailedAttempt,
    rc: ReconcileContext,
    base: (s: Status) => Status = (s) => s,
  ): Result {
    await this.write(obj, (s) => failedStatus(base(s), spec, obj.metadata.generation, f, new Date()), rc);
    const final = exhausted(spec, f.attempt);
    const reason = final ? (f.reason ?? PreheatReason.JobFailed) : PreheatReason.JobFailedWillRetry;
    this.ctx.events.record(obj, 'Warning', reason, `attempt ${f.attempt}: ${f.why}`);
    this.metrics.preheatJobs.labels(final ? 'failed' : 'retried').inc();
    return final ? undefined : { requeueAfter: retryDelay(spec.retry.backoff, f.attempt) };
  }

  /** A failed step (not a failed job): written where the user looks, then retried as the failure allows. */
  private async fail(
    obj: Obj,
    err: unknown,
    action: string,
    rc: ReconcileContext,
    base: (s: Status) => Status = (s) => s,
  ): Result {
    const view = describeFailure(err, action);
    if (err instanceof ManagerError) this.metrics.managerErrors.labels(err.kind).inc();
    const outcome = failureOutcome(view);
    await this.write(
      obj,
      (s) =>
        observed(base(s), obj.metadata.generation, { outcome, reason: view.reason, message: view.message }),
      rc,
    );
    // The manager's rate limit is its pace, not a failure: no Event (a burst of preheats would make one each), and
    // the retries spread over the next interval.
    const next = failureRequeue(view, this.ctx.config);
    if (view.quiet && next !== 'throw' && next !== undefined)
      return view.retry.kind === 'after' && !view.retry.fromServer
        ? { requeueAfter: spread(view.retry.ms) }
        : next;
    this.ctx.events.record(obj, 'Warning', view.reason, view.message);
    if (next === 'throw') throw err;
    return next;
  }
}

/** `ms` to twice `ms`, at random: retries of a burst do not come back together. */
const spread = (ms: number) => Math.round(ms * (1 + Math.random()));
