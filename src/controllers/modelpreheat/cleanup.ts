/**
 * Deleting a ModelPreheat: with `spec.evictOnDelete` its tasks are evicted from every peer first
 * (modelpreheat-cache.ts), then its job record is deleted on the manager, then the finalizer goes. An unreachable
 * manager is retried for CLEANUP_GRACE_MS after the deletion, then let go of with a Warning Event: a deletion must
 * not hang on a manager that may never come back.
 */
import { GVR, type ModelPreheat, type ModelPreheatSpec } from '../../api/index.ts';
import { ManagerError } from '../../manager/errors.ts';
import {
  hasFinalizer,
  removeFinalizer,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import { resolveManager } from '../managers.ts';
import { redact } from '../../redact.ts';
import { evictTasks, type CacheDeps } from './cache.ts';
import { directoryTasks, isDirectory } from './directory.ts';
import { ruleOf, storageCredentials } from './request.ts';

export const FINALIZER = 'peerload.io/delete-manager-job';
/** How long a deletion waits for an unreachable manager before it lets go of the job record. */
const CLEANUP_GRACE_MS = 120_000;

export async function cleanUp(
  deps: CacheDeps,
  obj: ModelPreheat,
  spec: ModelPreheatSpec,
  rc: ReconcileContext,
): Promise<ReconcileResult | void> {
  const { ctx, secrets, clients } = deps;
  if (!hasFinalizer(obj, FINALIZER)) return;
  if (spec.evictOnDelete) {
    const all = isDirectory(spec) ? await directoryEviction(deps, obj, spec, rc) : undefined;
    const waiting = await evictTasks(deps, obj, spec, rc, CLEANUP_GRACE_MS, all);
    if (waiting) return waiting;
  }
  // A directory's jobs are all in status.jobs (the first of them is status.jobID).
  const ids =
    obj.status?.jobs?.map((j) => j.id) ?? (obj.status?.jobID !== undefined ? [obj.status.jobID] : []);
  const deleted: number[] = [];
  for (const jobID of ids) {
    try {
      const manager = await resolveManager(
        spec.manager,
        obj.metadata.namespace!,
        ctx.config,
        secrets,
        rc.signal,
      );
      await clients.get(manager).deleteJob(jobID, { signal: rc.signal });
      deleted.push(jobID);
    } catch (err) {
      const gone = err instanceof ManagerError && err.kind === 'notFound';
      const waited = Date.now() - Date.parse(obj.metadata.deletionTimestamp!);
      if (!gone && waited < CLEANUP_GRACE_MS) throw err;
      if (!gone) {
        ctx.events.record(
          obj,
          'Warning',
          'JobCleanupAbandoned',
          `could not delete preheat job ${jobID} within ${CLEANUP_GRACE_MS / 1000}s: ${(err as Error).message}`,
        );
      }
    }
  }
  if (deleted.length > 0)
    ctx.events.record(
      obj,
      'Normal',
      'JobDeleted',
      `deleted preheat job${deleted.length > 1 ? 's' : ''} ${deleted.slice(0, 10).join(', ')}${deleted.length > 10 ? ` and ${deleted.length - 10} more` : ''} on the manager`,
    );
  await removeFinalizer(ctx.kube, GVR.modelPreheats, obj, FINALIZER, rc.signal);
  deps.listings.forget(`${obj.metadata.namespace}/${obj.metadata.name}`);
}

/**
 * Every file's task of a directory, from the generation's listing (listed again after an operator restart); when
 * the prefix cannot be listed, the tasks status names (the first 100) with a Warning Event.
 */
async function directoryEviction(
  deps: CacheDeps,
  obj: ModelPreheat,
  spec: ModelPreheatSpec,
  rc: ReconcileContext,
): Promise<{ url: string; taskID: string }[] | undefined> {
  const credentials = () =>
    storageCredentials(spec.objectStorage!, obj.metadata.namespace!, deps.secrets, rc.signal);
  try {
    const listing = await deps.listings.of(obj, spec, credentials, rc.signal);
    return directoryTasks(
      spec,
      listing.files,
      ruleOf(spec, deps.ctx.config.peerDaemonVersion),
      await credentials(),
    );
  } catch (err) {
    if ((obj.status?.evictedTasks ?? 0) === 0 && !obj.status?.evictionJobs)
      deps.ctx.events.record(
        obj,
        'Warning',
        'EvictionPartial',
        redact(
          `cannot list the directory to evict every file's task (${(err as Error).message}); evicting the ${obj.status?.tasks?.length ?? 0} task(s) status names`,
        ).slice(0, 1000),
      );
    return undefined;
  }
}
