/**
 * The deletion of a ServedModel: the model unregistered from every replica it may be on, then the finalizer
 * removed. Registrations under way are waited for first (a POST the model server took registers the model after
 * any unregister pass that ran before it ended).
 */
import {
  GVR,
  parseDuration,
  type ServedModel,
  type ServedModelSpec,
  type ServedModelStatus,
} from '../../api/index.ts';
import type { ReplicaServer } from '../../servers/driver.ts';
import {
  hasFinalizer,
  removeFinalizer,
  type ControllerContext,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import { pool } from './pool.ts';
import type { RegistrationRunner } from './registrations.ts';
import type { Replica } from './replicas.ts';
import { deletingConditions, withServedModelConditions } from './conditions.ts';
import type { StatusWrite } from '../status.ts';

export const FINALIZER = 'peerload.io/unregister-model';
/** Bounds of one model-server call during deletion: shorter as the grace deadline nears. */
const CLEANUP_CALL_TIMEOUT_MS = 10_000;
const MIN_CLEANUP_CALL_TIMEOUT_MS = 2_000;
/** How long a deletion pass may run past the grace deadline before the replicas it has not reached are let go. */
const CLEANUP_PASS_OVERRUN_MS = 5_000;
/** Room for replica names in a condition or Event (an Event note holds 1,024 characters). */
const MAX_LISTED_CHARS = 700;

export interface CleanupDeps {
  ctx: ControllerContext;
  registrations: RegistrationRunner<unknown>;
  /** The replica's model server, through its driver. */
  serverFor(sm: ServedModel, spec: ServedModelSpec, replica: Replica): ReplicaServer;
  writeStatus: StatusWrite<ServedModel, ServedModelStatus>;
  /** The grace period when the spec does not set one. */
  graceMs: number;
  /** Drops what the controller keeps for the object (called once its finalizer is gone). */
  forget(key: string, uid: string | undefined): void;
}

/**
 * The deletion pass. Replicas that cannot be reached are retried until the grace deadline (deletionTimestamp +
 * grace), then let go of; meanwhile the Ready condition and a `CleanupPending` Event name them and the deadline, and
 * retries are scheduled so the last one falls on the deadline (not on the work queue's growing backoff), so the
 * object is released right after it.
 */
export function servedModelCleanup(deps: CleanupDeps) {
  return (sm: ServedModel, spec: ServedModelSpec, discovered: Replica[], rc: ReconcileContext) =>
    cleanUp(deps, sm, spec, discovered, rc);
}

/** The grace deadline of a deletion, and when to look again before it. */
interface Deadline {
  grace: number;
  at: number;
  /** The next look: a quarter of the time since the deletion, within the poll bounds, never past the deadline. */
  retryIn(): number;
}

function deadlineOf(deps: CleanupDeps, sm: ServedModel, spec: ServedModelSpec): Deadline {
  const { pollBackoffStart, pollBackoffMax } = deps.ctx.config;
  const grace = spec.deletion?.gracePeriod ? parseDuration(spec.deletion.gracePeriod) : deps.graceMs;
  const started = Date.parse(sm.metadata.deletionTimestamp!);
  const at = started + grace;
  const retryIn = () => {
    const interval = Math.min(pollBackoffMax, Math.max(pollBackoffStart, (Date.now() - started) / 4));
    return Math.max(0, Math.min(interval, at - Date.now()));
  };
  return { grace, at, retryIn };
}

async function cleanUp(
  deps: CleanupDeps,
  sm: ServedModel,
  spec: ServedModelSpec,
  discovered: Replica[],
  rc: ReconcileContext,
): Promise<ReconcileResult | void> {
  if (!hasFinalizer(sm, FINALIZER)) return;
  const { ctx, registrations } = deps;
  const deadline = deadlineOf(deps, sm, spec);
  const until = new Date(deadline.at).toISOString();
  const deleting = (message: string) =>
    deps.writeStatus(
      sm,
      (s) => withServedModelConditions(s, sm.metadata.generation, deletingConditions(message)),
      rc.signal,
    );
  // Registrations the model server took would land after the unregister pass: those not sent yet are dropped,
  // the ones in flight are waited for (their end enqueues the object) until the grace deadline, then let go of.
  const inFlight = registrations.drain(sm.metadata.uid!);
  if (inFlight > 0 && Date.now() < deadline.at) {
    await deleting(
      `deleting: waiting for ${inFlight} registration(s) of ${spec.modelName} under way to end before ` +
        `unregistering it (until ${until})`,
    );
    return { requeueAfter: deadline.retryIn() };
  }
  registrations.prune(sm.metadata.uid!);
  const { known, failures } = await unregisterEverywhere(deps, sm, spec, discovered, deadline.at, rc);
  const names = listed(failures.map((f) => f.replica.pod ?? f.replica.endpoint).sort());
  if (failures.length > 0 && Date.now() < deadline.at) {
    await deleting(
      `deleting: ${spec.modelName} is still registered on ${failures.length} of ${known} replica(s) that ` +
        `cannot be reached: ${names}; retrying until ${until}, then letting go of them`,
    );
    const note = `unregistering ${spec.modelName} failed on ${names}; retrying until ${until}: ${failures[0]!.why}`;
    ctx.events.record(sm, 'Warning', 'CleanupPending', note);
    return { requeueAfter: deadline.retryIn() };
  }
  if (failures.length > 0)
    ctx.events.record(
      sm,
      'Warning',
      'CleanupAbandoned',
      `gave up unregistering ${spec.modelName} after ${deadline.grace / 1000}s from ${failures.length} replica(s): ` +
        `${names} (first error: ${failures[0]!.why})`,
    );
  else
    ctx.events.record(
      sm,
      'Normal',
      'Unregistered',
      `unregistered ${spec.modelName} from ${known} replica(s)`,
    );
  await removeFinalizer(ctx.kube, GVR.servedModels, sm, FINALIZER, rc.signal);
  deps.forget(`${sm.metadata.namespace}/${sm.metadata.name}`, sm.metadata.uid);
}

/**
 * The model unregistered from every replica it may be on (those status names and those found now). Replicas that
 * do not answer must not hold the pass past the deadline by much: each call is bounded by the time left, and the
 * whole pass (many replicas, `maxConcurrent` at a time) ends soon after the deadline; the replicas it did not get to
 * then count as unreachable.
 */
async function unregisterEverywhere(
  deps: CleanupDeps,
  sm: ServedModel,
  spec: ServedModelSpec,
  discovered: Replica[],
  deadline: number,
  rc: ReconcileContext,
): Promise<{ known: number; failures: { replica: Replica; why: string }[] }> {
  const left = deadline - Date.now();
  const timeoutMs = Math.min(CLEANUP_CALL_TIMEOUT_MS, Math.max(MIN_CLEANUP_CALL_TIMEOUT_MS, left));
  const passSignal = AbortSignal.any([
    rc.signal,
    AbortSignal.timeout(Math.max(left, 0) + CLEANUP_PASS_OVERRUN_MS),
  ]);
  const known = new Map<string, Replica>();
  for (const r of [...(sm.status?.replicas ?? []), ...discovered]) known.set(r.endpoint, r);
  const failures: { replica: Replica; why: string }[] = [];
  await pool([...known.values()], spec.rollout.maxConcurrent, async (r) => {
    try {
      if (passSignal.aborted) throw new Error('not reached before the grace deadline');
      await deps.serverFor(sm, spec, r).unregisterAll(spec.modelName, { signal: passSignal, timeoutMs });
    } catch (err) {
      failures.push({ replica: r, why: (err as Error).message });
    }
  });
  return { known: known.size, failures };
}

/** Names, as many as fit in the room of a note, then how many more. */
function listed(names: readonly string[]): string {
  const shown: string[] = [];
  let room = MAX_LISTED_CHARS;
  for (const n of names) {
    if (n.length + 2 > room) break;
    shown.push(n);
    room -= n.length + 2;
  }
  const more = names.length - shown.length;
  return shown.join(', ') + (more > 0 ? ` and ${more} more` : '');
}
