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
import { evictTasks, type CacheDeps } from './cache.ts';

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
    const waiting = await evictTasks(deps, obj, spec, rc, CLEANUP_GRACE_MS);
    if (waiting) return waiting;
  }
  const jobID = obj.status?.jobID;
  if (jobID !== undefined) {
    try {
      const manager = await resolveManager(
        spec.manager,
        obj.metadata.namespace!,
        ctx.config,
        secrets,
        rc.signal,
      );
      await clients.get(manager).deleteJob(jobID, { signal: rc.signal });
      ctx.events.record(obj, 'Normal', 'JobDeleted', `deleted preheat job ${jobID} on the manager`);
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
  await removeFinalizer(ctx.kube, GVR.modelPreheats, obj, FINALIZER, rc.signal);
}
