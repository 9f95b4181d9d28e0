/**
 * The P2P cache of a preheated resource: which peers hold each task (`status.cache`, from manager get_task jobs),
 * refreshed on demand (the peerload.io/refresh-cache annotation) and every `spec.cacheRefreshInterval`; and, with
 * `spec.evictOnDelete`, the tasks deleted from every peer (delete_task jobs) before the resource goes.
 *
 * Both are manager jobs that end after the manager's next poll (30 s on v2.5.1), so their ids live in status and
 * each reconcile looks at them once, as the preheat job itself is followed.
 */
import {
  GVR,
  MAX_CACHE_TASKS,
  MAX_LISTED_TASKS,
  parseDuration,
  type CacheStatus,
  type ModelPreheat,
  type ModelPreheatSpec,
  type ModelPreheatStatus,
  type ServedModel,
} from '../../api/index.ts';
import { planEviction } from '../../policy/shared-tasks.ts';
import type { ManagerClient } from '../../manager/client.ts';
import { ManagerError } from '../../manager/errors.ts';
import { isTerminalState, jobPeerTasks, jobTaskPeers, type ManagerJob } from '../../manager/types.ts';
import { redact } from '../../redact.ts';
import type { ControllerContext, ReconcileContext, ReconcileResult } from '../../runtime/index.ts';
import { ManagerClients, resolveManager } from '../managers.ts';
import type { SecretReader } from '../secrets.ts';
import type { DirectoryListings } from './directory.ts';

export const REFRESH_ANNOTATION = 'peerload.io/refresh-cache';
/** How long a failed refresh waits before it tries again. */
const REFRESH_RETRY_MS = 60_000;

type Status = ModelPreheatStatus;

export interface CacheDeps {
  ctx: ControllerContext;
  secrets: SecretReader;
  clients: ManagerClients;
  writeStatus: (
    obj: ModelPreheat,
    change: (s: Status) => Status,
    signal: AbortSignal,
  ) => Promise<{ object: ModelPreheat }>;
  /** A directory's listing per generation (eviction evicts every file's task). */
  listings: DirectoryListings;
}

/** Whether the resource needs the finalizer for its cache (eviction on delete). */
export const CACHE_FINALIZER_NEEDED = (spec: ModelPreheatSpec): boolean => spec.evictOnDelete;

async function clientOf(deps: CacheDeps, obj: ModelPreheat, spec: ModelPreheatSpec, signal: AbortSignal) {
  const manager = await resolveManager(
    spec.manager,
    obj.metadata.namespace!,
    deps.ctx.config,
    deps.secrets,
    signal,
  );
  return deps.clients.get(manager);
}

/** The outcome of each job, or undefined while any is still running. */
async function finished(
  client: ManagerClient,
  jobs: { taskID: string; jobID: number }[],
  signal?: AbortSignal,
) {
  const out: { taskID: string; job?: ManagerJob; error?: string }[] = [];
  for (const j of jobs) {
    try {
      const job = await client.getJob(j.jobID, { signal });
      if (!isTerminalState(job.state)) return undefined;
      out.push({ taskID: j.taskID, job });
    } catch (err) {
      if (!(err instanceof ManagerError && err.kind === 'notFound')) throw err;
      out.push({ taskID: j.taskID, error: `job ${j.jobID} no longer exists on the manager` });
    }
  }
  return out;
}

/** A preheat that succeeded: keep status.cache as the spec and the annotation ask. */
export async function cacheStep(
  deps: CacheDeps,
  obj: ModelPreheat,
  spec: ModelPreheatSpec,
  rc: ReconcileContext,
): Promise<ReconcileResult | void> {
  const tasks = (obj.status?.tasks ?? []).slice(0, MAX_CACHE_TASKS);
  if (tasks.length === 0) return;
  const cache = obj.status?.cache;
  const requested = obj.metadata.annotations?.[REFRESH_ANNOTATION];
  const intervalMs = spec.cacheRefreshInterval ? parseDuration(spec.cacheRefreshInterval) : undefined;
  const now = Date.now();
  const { pollBackoffStart } = deps.ctx.config;
  const write = (change: (c: CacheStatus | undefined) => CacheStatus) =>
    deps.writeStatus(obj, (s) => ({ ...s, cache: change(s.cache) }), rc.signal);

  const asked = requested !== undefined && requested !== cache?.requested;
  const observed = cache?.observedAt ? Date.parse(cache.observedAt) : undefined;
  const due = asked || (intervalMs !== undefined && (observed === undefined || now - observed >= intervalMs));
  // Nothing running and nothing due: no manager, no Secret, no write. An idle operator holds thousands of
  // succeeded preheats, each resynced and requeued, so one that costs anything costs it thousands of times.
  if (!cache?.refreshing?.length && !due)
    return intervalMs && observed !== undefined ? { requeueAfter: observed + intervalMs - now } : undefined;

  try {
    const client = await clientOf(deps, obj, spec, rc.signal);
    if (cache?.refreshing?.length) {
      const done = await finished(client, cache.refreshing, rc.signal);
      if (!done) return { requeueAfter: pollBackoffStart };
      await write((c) => observedCache(done, c));
      const holders = done.reduce(
        (n, d) => n + (d.job ? jobTaskPeers(d.job).filter((p) => p.finished).length : 0),
        0,
      );
      deps.ctx.events.record(
        obj,
        'Normal',
        'CacheObserved',
        `${holders} peer(s) hold the ${done.length} task(s)`,
      );
      return intervalMs ? { requeueAfter: intervalMs } : undefined;
    }

    const refreshing = await createTaskJobs(client, 'get_task', obj, spec, tasks, rc.signal);
    await write((c) => ({
      ...(c ?? { tasks: [] }),
      refreshing,
      ...(requested !== undefined ? { requested } : {}),
    }));
    return { requeueAfter: pollBackoffStart };
  } catch (err) {
    const message = `cache refresh failed: ${redact((err as Error).message)}`.slice(0, 1024);
    rc.log.warn({ err: message }, 'cache refresh failed');
    await write((c) => ({ ...(c ?? { tasks: [] }), refreshing: undefined, message }));
    return { requeueAfter: REFRESH_RETRY_MS };
  }
}

/** status.cache from the get_task jobs that ended: which peers hold each task, and why a job told nothing. */
function observedCache(
  done: { taskID: string; job?: ManagerJob; error?: string }[],
  c: CacheStatus | undefined,
): CacheStatus {
  const errors = done.flatMap((d) =>
    d.error
      ? [d.error]
      : d.job!.state === 'FAILURE'
        ? [`get_task job ${d.job!.id} failed: ${failureWords(d.job!)}`]
        : [],
  );
  return {
    observedAt: new Date().toISOString(),
    jobID: done.at(-1)?.job?.id,
    tasks: done.map((d) => {
      const peers = d.job?.state === 'SUCCESS' ? jobTaskPeers(d.job) : [];
      return {
        taskID: d.taskID,
        peerCount: peers.filter((p) => p.finished).length,
        peers: peers.slice(0, MAX_LISTED_TASKS).map((p) => ({
          ip: p.ip,
          ...(p.hostname ? { hostname: p.hostname } : {}),
          ...(p.hostType ? { hostType: p.hostType } : {}),
          finished: p.finished,
        })),
      };
    }),
    ...(errors.length ? { message: redact(errors.join('; ')).slice(0, 1024) } : {}),
    ...(c?.requested !== undefined ? { requested: c.requested } : {}),
  };
}

/** delete_task jobs at once: a directory's tasks are evicted in batches of this many (status.evictedTasks). */
const EVICTION_BATCH = 100;

/**
 * Deletes the resource's tasks from every peer that holds them (spec.evictOnDelete): `all` (every file of a
 * directory), else the tasks status names; in batches of {@link EVICTION_BATCH}. Returns when to look again while
 * the delete_task jobs run or batches remain; undefined once they ended (or `graceMs` after the deletion, whatever
 * the manager says: a deletion must not hang on an unreachable manager).
 */
export async function evictTasks(
  deps: CacheDeps,
  obj: ModelPreheat,
  spec: ModelPreheatSpec,
  rc: ReconcileContext,
  graceMs: number,
  all: readonly { taskID: string; url: string }[] = (obj.status?.tasks ?? []).slice(0, EVICTION_BATCH),
): Promise<ReconcileResult | undefined> {
  const evicted = obj.status?.evictedTasks ?? 0;
  const tasks = all.slice(evicted, evicted + EVICTION_BATCH);
  if (tasks.length === 0) return undefined;
  const waited = Date.now() - Date.parse(obj.metadata.deletionTimestamp!);
  const next = () => nextBatch(deps, obj, rc, evicted + tasks.length, all.length);
  try {
    const client = await clientOf(deps, obj, spec, rc.signal);
    const jobs = obj.status?.evictionJobs;
    if (!jobs) {
      // Shared-task hook (src/policy/shared-tasks.ts): a task another resource in the cluster still uses stays
      // (its informers are started by the ModelPreheat controller's factory).
      const plan = planEviction(obj, tasks, {
        preheats: deps.ctx.informers.get<ModelPreheat>(GVR.modelPreheats).list(),
        servedModels: deps.ctx.informers.get<ServedModel>(GVR.servedModels).list(),
      });
      if (plan.kept.length > 0)
        deps.ctx.events.record(
          obj,
          'Normal',
          'EvictionSkipped',
          `${plan.kept.length} task(s) not evicted: still used by ${[...new Set(plan.kept.map((k) => k.usedBy))].slice(0, 3).join(', ')}`,
        );
      if (plan.evict.length === 0) return next();
      const created = await createTaskJobs(client, 'delete_task', obj, spec, plan.evict, rc.signal);
      await deps.writeStatus(obj, (s) => ({ ...s, evictionJobs: created }), rc.signal);
      return { requeueAfter: deps.ctx.config.pollBackoffStart };
    }
    const done = await finished(client, jobs, rc.signal);
    if (!done) {
      if (waited < graceMs) return { requeueAfter: deps.ctx.config.pollBackoffStart };
      deps.ctx.events.record(
        obj,
        'Warning',
        'EvictionAbandoned',
        `delete_task jobs still running after ${Math.round(graceMs / 1000)}s; the peers may keep the tasks`,
      );
      return undefined;
    }
    reportEviction(deps, obj, done);
    return next();
  } catch (err) {
    if (waited < graceMs) throw err;
    deps.ctx.events.record(
      obj,
      'Warning',
      'EvictionAbandoned',
      `could not evict the tasks within ${Math.round(graceMs / 1000)}s: ${redact((err as Error).message)}`.slice(
        0,
        1000,
      ),
    );
    return undefined;
  }
}

/** The next batch of a directory's eviction, or undefined when none is left. */
async function nextBatch(
  deps: CacheDeps,
  obj: ModelPreheat,
  rc: ReconcileContext,
  evicted: number,
  total: number,
): Promise<ReconcileResult | undefined> {
  if (evicted >= total) return undefined;
  await deps.writeStatus(obj, (s) => ({ ...s, evictionJobs: undefined, evictedTasks: evicted }), rc.signal);
  return { requeueAfter: 1 };
}

/** One batch's delete_task jobs ended: an Event with what they deleted, or why they did not. */
function reportEviction(
  deps: CacheDeps,
  obj: ModelPreheat,
  done: { taskID: string; job?: ManagerJob; error?: string }[],
): void {
  let deleted = 0;
  const failures: string[] = [];
  for (const d of done) {
    if (d.error) failures.push(d.error);
    else if (d.job!.state === 'FAILURE') failures.push(`job ${d.job!.id}: ${failureWords(d.job!)}`);
    else {
      const { success, failure } = jobPeerTasks(d.job!);
      deleted += new Set(success.map((t) => t.ip)).size;
      // The scheduler may hold two peers of one host for a task (the preheat's and a proxy download's): the
      // first delete removes the file, the second answers "not found". Gone is what was asked for.
      const deletedIPs = new Set(success.map((t) => t.ip));
      failures.push(
        ...failure
          .filter((f) => !deletedIPs.has(f.ip) && !/not found/i.test(f.description ?? ''))
          .map((f) => `${f.ip ?? f.hostname}: ${f.description ?? 'failed'}`),
      );
    }
  }
  if (failures.length === 0)
    deps.ctx.events.record(
      obj,
      'Normal',
      'TasksEvicted',
      `deleted ${done.length} task(s) from ${deleted} peer(s)`,
    );
  else
    deps.ctx.events.record(
      obj,
      'Warning',
      'EvictionFailed',
      redact(`deleted from ${deleted} peer(s); ${failures.slice(0, 3).join('; ')}`).slice(0, 1000),
    );
}

/** One get_task or delete_task job per task, each carrying the resource in its `bio` to be traced. */
async function createTaskJobs(
  client: ManagerClient,
  type: 'get_task' | 'delete_task',
  obj: ModelPreheat,
  spec: ModelPreheatSpec,
  tasks: { taskID: string }[],
  signal?: AbortSignal,
): Promise<{ taskID: string; jobID: number }[]> {
  const bio = `peerload ${obj.metadata.namespace}/${obj.metadata.name} uid=${obj.metadata.uid} ${type}`;
  const created: { taskID: string; jobID: number }[] = [];
  for (const t of tasks) {
    const req = { taskID: t.taskID, schedulerClusterIDs: spec.schedulerClusterIDs, bio };
    const job = await (type === 'get_task'
      ? client.createGetTaskJob(req, { signal })
      : client.createDeleteTaskJob(req, { signal }));
    created.push({ taskID: t.taskID, jobID: job.id });
  }
  return created;
}

function failureWords(job: ManagerJob): string {
  const { errors, failure } = jobPeerTasks(job);
  return (
    [...errors, ...failure.map((f) => f.description ?? '')].filter(Boolean).join('; ') || 'no reason given'
  );
}
