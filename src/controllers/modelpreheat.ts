/**
 * The ModelPreheat controller: one manager preheat job per generation of the spec, followed to SUCCESS or
 * FAILURE, retried with backoff up to `spec.retry.limit`, reported in status, conditions and Events.
 *
 * Status is the memory (design.md): the job id is written before anything depends on it, so an operator
 * restart continues polling the same job. A crash between "job created" and "status written" leaves one extra
 * job on the manager when the next reconcile creates it again; preheating the same URLs twice is harmless
 * (the second job finds the content cached) and each job carries the resource in its `bio` to be traced.
 */
import {
  ModelPreheatSpec,
  parseDuration,
  type ModelPreheat,
  type ModelPreheatStatus,
  GVR,
} from '../api/index.ts';
import type { ManagerClient } from '../manager/client.ts';
import { ManagerError } from '../manager/errors.ts';
import type { ManagerJob } from '../manager/types.ts';
import {
  Controller,
  addFinalizer,
  getCondition,
  hasFinalizer,
  isBeingDeleted,
  removeFinalizer,
  specChanged,
  type ControllerContext,
  type ReconcileContext,
  type ReconcileResult,
} from '../runtime/index.ts';
import {
  ManagerClients,
  ReachDeniedError,
  managerReach,
  resolveManager,
  useClusterManagers,
} from './managers.ts';
import { describeFailure } from './modelpreheat-failures.ts';
import {
  PreheatCondition,
  PreheatReason,
  preheatConditions,
  preheatPhase,
  withPreheatConditions,
  type PreheatConditionReason,
  type PreheatObservation,
} from './modelpreheat-status.ts';
import { planPreheat } from './preheat-request.ts';
import { carriedPeers, contentKey, targetOutcomes, targetsToPreheat } from './preheat-targets.ts';
import { failureText, peerResults } from './preheat-results.ts';
import { cacheStep, CACHE_FINALIZER_NEEDED } from './modelpreheat-cache.ts';
import { FINALIZER, cleanUp } from './modelpreheat-cleanup.ts';
import { SecretReader } from './secrets.ts';
import { operatorMetrics } from './metrics.ts';
import { invalidSpec, specProblem, statusWriter } from './status.ts';

export { FINALIZER } from './modelpreheat-cleanup.ts';
export const SUCCEEDED = PreheatCondition.Succeeded;
const MAX_RETRY_DELAY_MS = 3_600_000;
/** Bound of the one look at a new job before its first status write (see createJob). */
const FIRST_LOOK_TIMEOUT_MS = 2_000;

type Obj = ModelPreheat;
type Status = ModelPreheatStatus;

export function modelPreheatController(ctx: ControllerContext): Controller<Obj> {
  const informer = ctx.informers.get<Obj>(GVR.modelPreheats);
  // Reach-policy hook: ClusterManagers for resolveManager, the ServedModel informer for evictOnDelete's shared-task
  // check (src/policy/shared-tasks.ts).
  useClusterManagers(ctx);
  ctx.informers.get(GVR.servedModels);
  // Polls of a running job ask for the manager's credentials each time: a rotated Secret is seen within 30 s.
  const secrets = new SecretReader(ctx.kube, { ttlMs: 30_000 });
  const clients = new ManagerClients();
  const metrics = operatorMetrics(ctx.metrics);
  const { pollBackoffStart, pollBackoffMax } = ctx.config;

  const writeStatus = statusWriter<Obj, Status>(ctx, GVR.modelPreheats);

  /** `s` with the phase and conditions of what was observed (modelpreheat-status.ts decides them). */
  const withCondition = (
    s: Status,
    gen: number | undefined,
    o: Omit<PreheatObservation, 'jobState'>,
  ): Status => {
    const observation = { ...o, jobState: s.jobGeneration === gen ? s.state : undefined };
    return withPreheatConditions(
      { ...s, phase: preheatPhase(observation) },
      gen,
      preheatConditions(observation),
    );
  };

  async function reconcile(key: string, rc: ReconcileContext): Promise<ReconcileResult | void> {
    // Through the status writer: a requeue may come before the watch has delivered our last status write.
    const obj = ctx.status.latest(informer.get(key));
    if (!obj) return; // deleted: the operator keeps nothing per resource
    const namespace = obj.metadata.namespace!;
    const gen = obj.metadata.generation;

    const parsed = ModelPreheatSpec.safeParse(obj.spec);
    if (!parsed.success) {
      const message = specProblem(parsed.error);
      const problem = { finalizer: FINALIZER, message, skipped: 'job not deleted' };
      const report = () =>
        writeStatus(
          obj,
          (s) => withCondition(s, gen, { outcome: 'Failed', reason: PreheatReason.InvalidSpec, message }),
          rc.signal,
        );
      return invalidSpec(ctx, GVR.modelPreheats, obj, problem, report, rc.signal);
    }
    const spec = parsed.data;

    // Reach-policy hook (src/policy/reach.ts): a manager the admin did not allow is never contacted, not even to
    // clean up on delete (the finalizer goes with a CleanupSkipped Event); the object is Stalled naming the rule.
    const reach = await managerReach(spec.manager, namespace, ctx.config, 'spec.manager');
    if (!reach.allowed) {
      const denied = new ReachDeniedError(reach.reason, reach.message);
      const problem = { finalizer: FINALIZER, message: reach.message, skipped: 'manager not contacted' };
      return invalidSpec(
        ctx,
        GVR.modelPreheats,
        obj,
        problem,
        () => fail(obj, denied, 'use the manager', rc),
        rc.signal,
      );
    }

    if (isBeingDeleted(obj)) return cleanUp(cacheDeps, obj, spec, rc);
    const needsFinalizer = spec.deleteJobOnCleanup || CACHE_FINALIZER_NEEDED(spec);
    if (needsFinalizer && !hasFinalizer(obj, FINALIZER)) {
      await addFinalizer(ctx.kube, GVR.modelPreheats, obj, FINALIZER, rc.signal);
    } else if (!needsFinalizer && hasFinalizer(obj, FINALIZER)) {
      await removeFinalizer(ctx.kube, GVR.modelPreheats, obj, FINALIZER, rc.signal);
    }

    // The job of the current generation, if one was created; a new generation starts over.
    const job = obj.status?.jobGeneration === gen && obj.status?.state !== undefined ? obj.status : undefined;
    if (job?.state === 'SUCCESS') return cacheStep(cacheDeps, obj, spec, rc);
    if (job?.state === 'FAILURE' && (job.attempts ?? 1) > spec.retry.limit) return;
    // A final failure stays final for this generation (a resync or restart must not re-send a request the
    // manager rejected); editing the spec starts over. Only the operator's own configuration can change under it.
    const succeeded = getCondition(obj.status?.conditions, SUCCEEDED);
    if (
      succeeded?.status === 'False' &&
      succeeded.observedGeneration === gen &&
      succeeded.reason !== 'ManagerNotConfigured'
    ) {
      return;
    }

    let client: ManagerClient;
    let managerURL: string;
    try {
      const manager = await resolveManager(spec.manager, namespace, ctx.config, secrets, rc.signal);
      client = clients.get(manager);
      managerURL = manager.url;
    } catch (err) {
      return fail(obj, err, 'resolve the manager', rc);
    }

    if (!job) {
      // Targeted peers that hold this content already are not preheated again (a ServedModel scaling out).
      if (targetsToPreheat(spec, obj.status)?.length === 0)
        return alreadyPreheated(obj, spec.targets?.ips?.length ?? 0, contentKey(spec), rc);
      return createJob(obj, spec, client, managerURL, 1, rc);
    }
    if (job.state === 'FAILURE') {
      const wait = Date.parse(job.nextRetryAt ?? '') - Date.now();
      if (wait > 0) return { requeueAfter: wait };
      return createJob(obj, spec, client, managerURL, (job.attempts ?? 1) + 1, rc);
    }
    return pollJob(obj, spec, client, job, rc);
  }

  /** Every targeted peer holds this content already: success without a job. */
  async function alreadyPreheated(obj: Obj, count: number, key: string, rc: ReconcileContext): Promise<void> {
    const gen = obj.metadata.generation;
    await writeStatus(
      obj,
      (s) =>
        withCondition(
          {
            ...s,
            contentKey: key,
            state: 'SUCCESS',
            jobGeneration: gen,
            attempts: 0,
            completedAt: new Date().toISOString(),
            nextRetryAt: undefined,
          },
          gen,
          {
            outcome: 'Succeeded',
            reason: PreheatReason.AlreadyPreheated,
            message: `all ${count} targeted peer(s) hold the content already: no job needed`,
          },
        ),
      rc.signal,
    );
  }

  const cacheDeps = { ctx, secrets, clients, writeStatus };

  async function createJob(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    managerURL: string,
    attempt: number,
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    const gen = obj.metadata.generation;
    let created: ManagerJob;
    let tasks: { url: string; taskID: string }[];
    try {
      const bio = `peerload ${obj.metadata.namespace}/${obj.metadata.name} uid=${obj.metadata.uid} generation=${gen} attempt=${attempt}`;
      const plan = await planPreheat(
        spec,
        obj.metadata.namespace!,
        secrets,
        { bio },
        new Date(),
        rc.signal,
        ctx.config.peerDaemonVersion,
      );
      tasks = plan.tasks;
      const ips = targetsToPreheat(spec, obj.status);
      if (ips) plan.request.ips = ips;
      created = await client.createPreheatJob(plan.request);
    } catch (err) {
      return fail(obj, err, 'create the preheat job', rc);
    }
    rc.log.info({ jobID: created.id, groupID: created.groupID, attempt }, 'created preheat job');
    const key = contentKey(spec);
    const started = (s: Status): Status => ({
      ...s,
      contentKey: key,
      peers: carriedPeers(s, key).length > 0 ? carriedPeers(s, key) : undefined,
      state: created.state,
      jobID: created.id,
      groupID: created.groupID,
      managerURL,
      jobGeneration: gen,
      attempts: attempt,
      startedAt: new Date().toISOString(),
      completedAt: undefined,
      nextRetryAt: undefined,
      tasks: tasks.length > 0 ? tasks.slice(0, 100) : undefined,
      successCount: undefined,
      failureCount: undefined,
      successTasks: undefined,
      failureTasks: undefined,
    });
    // One look at the job before the first status write: a job the seed peers finish at once (the task is already
    // cached, or a small file) then costs one status write instead of two, and the apiserver's writes are what bounds
    // a burst of preheats (bench row 1). The look is a single attempt with a short bound, so the job id — status is
    // the operator's only memory of the job — is never left unwritten for long; any other answer is left to polling.
    const first = await client
      .getJob(created.id, { timeoutMs: FIRST_LOOK_TIMEOUT_MS })
      .catch(() => undefined);
    if (first?.state === 'SUCCESS') return succeed(obj, spec, started, first, attempt, rc);

    await writeStatus(
      obj,
      (s) =>
        withCondition(started(s), gen, {
          outcome: 'Progressing',
          reason: PreheatReason.JobCreated,
          message: `preheat job ${created.id} (${created.groupID}) created on ${managerURL}, attempt ${attempt} of ${spec.retry.limit + 1}`,
        }),
      rc.signal,
    );
    // No Event here: the condition (reason JobCreated) says it, and at 1,000 resources an Event per job creation
    // was a quarter of the apiserver writes (bench row 1). Outcomes (JobSucceeded, JobFailed...) get Events.
    return { requeueAfter: pollBackoffStart };
  }

  /**
   * Records a successful job; `base` carries what else this same write must say (the job itself, when new).
   * A job the manager calls SUCCESS although no peer reported the content is a failure: the real manager (v2.5.1,
   * scope single_seed_peer) ends a preheat of a URL its seed peer could not fetch (an origin 404 or 403) SUCCESS with
   * `success_tasks` and `failure_tasks` both null, and only the scheduler's log says why.
   */
  async function succeed(
    obj: Obj,
    spec: ModelPreheatSpec,
    base: (s: Status) => Status,
    job: ManagerJob,
    attempt: number,
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    const peers = peerResults(job);
    if (peers.successCount === 0) {
      const why =
        `job ${job.id} ended SUCCESS but no peer reported the content (${peers.failureCount} failed): ` +
        'the seed peer could not fetch it — check that the URL exists and that its credentials are valid';
      return recordFailure(obj, spec, attempt, why, rc, job, base, PreheatReason.NoPeerSucceeded);
    }
    await writeStatus(
      obj,
      (s) =>
        withCondition(
          {
            ...base(s),
            state: 'SUCCESS',
            completedAt: new Date().toISOString(),
            ...peers,
            ...targetOutcomes(spec, base(s), job),
          },
          obj.metadata.generation,
          {
            outcome: 'Succeeded',
            reason: PreheatReason.JobSucceeded,
            message:
              `preheat job ${job.id} succeeded on ${peers.successCount} peer(s)` +
              (peers.failureCount ? `, failed on ${peers.failureCount}` : ''),
          },
        ),
      rc.signal,
    );
    ctx.events.record(obj, 'Normal', 'JobSucceeded', `preheat job ${job.id} succeeded (attempt ${attempt})`);
    metrics.preheatJobs.labels('succeeded').inc();
  }

  async function pollJob(
    obj: Obj,
    spec: ModelPreheatSpec,
    client: ManagerClient,
    current: Status,
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    const gen = obj.metadata.generation;
    const attempt = current.attempts ?? 1;
    let job: ManagerJob;
    try {
      job = await client.getJob(current.jobID!);
    } catch (err) {
      if (err instanceof ManagerError && err.kind === 'notFound') {
        metrics.managerErrors.labels(err.kind).inc();
        // The record was deleted on the manager: the outcome is unknowable, so count it as a failed attempt.
        return recordFailure(obj, spec, attempt, `job ${current.jobID} no longer exists on the manager`, rc);
      }
      return fail(obj, err, `poll preheat job ${current.jobID}`, rc);
    }

    if (job.state === 'SUCCESS') return succeed(obj, spec, (s) => s, job, attempt, rc);
    if (job.state === 'FAILURE') return recordFailure(obj, spec, attempt, failureText(job), rc, job);

    if (job.state !== current.state) {
      await writeStatus(
        obj,
        (s) =>
          withCondition({ ...s, state: job.state }, gen, {
            outcome: 'Progressing',
            reason: PreheatReason.JobRunning,
            message: `preheat job ${job.id} is ${job.state}, attempt ${attempt} of ${spec.retry.limit + 1}`,
          }),
        rc.signal,
      );
    }
    // Poll less often the longer the job runs: half its age, within [start, max]. Computed from status, so
    // the schedule survives an operator restart.
    const age = Date.now() - Date.parse(current.startedAt ?? new Date().toISOString());
    return { requeueAfter: Math.min(pollBackoffMax, Math.max(pollBackoffStart, age / 2)) };
  }

  async function recordFailure(
    obj: Obj,
    spec: ModelPreheatSpec,
    attempt: number,
    why: string,
    rc: ReconcileContext,
    job?: ManagerJob,
    base: (s: Status) => Status = (s) => s,
    reason: PreheatConditionReason = PreheatReason.JobFailed,
  ): Promise<ReconcileResult | void> {
    const gen = obj.metadata.generation;
    const peers = job ? peerResults(job) : {};
    const exhausted = attempt > spec.retry.limit;
    const delay = Math.min(MAX_RETRY_DELAY_MS, parseDuration(spec.retry.backoff) * 2 ** (attempt - 1));
    await writeStatus(
      obj,
      (current) => {
        const s = { ...base(current), ...targetOutcomes(spec, base(current), job, why) };
        return exhausted
          ? withCondition(
              {
                ...s,
                ...peers,
                state: 'FAILURE',
                completedAt: new Date().toISOString(),
                nextRetryAt: undefined,
              },
              gen,
              {
                outcome: 'Failed',
                reason,
                message: `preheat failed after ${attempt} attempt(s): ${why}`,
              },
            )
          : withCondition(
              { ...s, ...peers, state: 'FAILURE', nextRetryAt: new Date(Date.now() + delay).toISOString() },
              gen,
              {
                outcome: 'Progressing',
                reason: PreheatReason.JobFailedWillRetry,
                message: `attempt ${attempt} of ${spec.retry.limit + 1} failed: ${why}; retrying in ${Math.round(delay / 1000)}s`,
              },
            );
      },
      rc.signal,
    );
    ctx.events.record(
      obj,
      'Warning',
      exhausted ? reason : PreheatReason.JobFailedWillRetry,
      `attempt ${attempt}: ${why}`,
    );
    metrics.preheatJobs.labels(exhausted ? 'failed' : 'retried').inc();
    return exhausted ? undefined : { requeueAfter: delay };
  }

  /** Writes the failure where the user looks, then retries as the failure allows. */
  async function fail(
    obj: Obj,
    err: unknown,
    action: string,
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    const view = describeFailure(err, action);
    if (err instanceof ManagerError) metrics.managerErrors.labels(err.kind).inc();
    const gen = obj.metadata.generation;
    await writeStatus(
      obj,
      (s) =>
        withCondition(s, gen, {
          outcome: view.final ? 'Failed' : view.blocked ? 'Blocked' : 'Progressing',
          reason: view.reason,
          message: view.message,
        }),
      rc.signal,
    );
    ctx.events.record(obj, 'Warning', view.reason, view.message);
    switch (view.retry.kind) {
      case 'none':
        return;
      case 'after':
        return { requeueAfter: view.retry.ms };
      case 'backoff':
        throw err;
    }
  }

  return new Controller<Obj>(
    {
      name: 'modelpreheat',
      for: informer,
      reconcile,
      workers: ctx.config.workers,
      predicate: specChanged,
    },
    { logger: ctx.logger, metrics: ctx.metrics },
  );
}
