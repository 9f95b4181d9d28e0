/**
 * What the ServedModel reconciler decides beyond status: whether the rollout starts with a seed replica, whether
 * the status is written now or coalesced, when to look again, how long an ended registration is kept, and the
 * Events of a change of Ready or of a scale-out. Pure
 * (time and jitter are arguments), so every case is unit-tested.
 */
import type { Condition, ServedModelSpec } from '../../api/index.ts';
import type { ReconcileResult } from '../../runtime/index.ts';
import type { Gate } from './preheat.ts';
import type { EndedRegistration, ReplicaEvent, ReplicaOutcome } from './replica.ts';
import type { ReplicaStatus } from './replica-status.ts';
import { ReplicaFailureReason } from './conditions.ts';

/** Static endpoints send no events: look at them this often once everything is ready (jittered ±20 %, so 1,000
 *  ServedModels do not all check at once). A 60 s period cost an idle operator 2.3 % of a core. */
export const STATIC_RECHECK_MS = 300_000;
/** How often a ServedModel whose every failure needs a change (Stalled) looks again by itself; as long an ended
 *  registration that needs a change is kept, so passes do not register again at poll rate. */
export const STALLED_RECHECK_MS = 300_000;
/** At most one status write per object this often when only progress changed (conditions' status or reason did
 *  not): a rollout over many replicas would otherwise write once per replica phase. */
export const STATUS_COALESCE_MS = 2_000;

/** A failure that retrying cannot fix until the spec, the archive or the model server changes. Refused credentials
 *  are not one: the key sidecar republishes the Secret on rotation. */
export const needsChange = (o: ReplicaOutcome): boolean =>
  o.failure !== undefined && !o.failure.retryable && o.failure.kind !== 'auth';

/**
 * Whether the rollout starts with one seed replica, alone: only when asked, and when nothing put the model in the
 * network yet (a preheat that succeeded, node targeting, or a replica that registered it before).
 */
export function needsSeed(
  spec: { rollout: Pick<ServedModelSpec['rollout'], 'seedFirst'> },
  gate: Gate,
  nodeTargeting: boolean,
  previous: ReadonlyMap<string, ReplicaStatus>,
): boolean {
  if (!spec.rollout.seedFirst || gate.state === 'open' || nodeTargeting) return false;
  return ![...previous.values()].some((r) => r.registered);
}

/** What the conditions say, without messages and times (which change with progress). */
export function conditionsDigest(
  conditions: readonly Pick<Condition, 'type' | 'status' | 'reason'>[],
): string {
  return conditions
    .map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`)
    .sort()
    .join(',');
}

export interface WriteInput {
  generation: number | undefined;
  observedGeneration: number | undefined;
  conditionsBefore: readonly Condition[];
  conditionsAfter: readonly Condition[];
  /** Registrations seen ended for the first time whose plugin said whether the download was a local hit. */
  newLocalHits: number;
  /** Since the last status write of this object. */
  sinceWriteMs: number;
}

/**
 * Whether the status is written in this pass. Progress alone (phases, counts) waits for the coalescing interval;
 * a change of what the conditions say (status or reason), of the generation, or a replica's local hit is written
 * at once. (A registration's outcome is not lost to a coalesced pass: it is settled only once a write holds it.)
 */
export function writeNow(i: WriteInput): boolean {
  if (i.newLocalHits > 0 || i.observedGeneration !== i.generation) return true;
  if (conditionsDigest(i.conditionsAfter) !== conditionsDigest(i.conditionsBefore)) return true;
  return i.sinceWriteMs >= STATUS_COALESCE_MS;
}

export interface LookInput {
  replicas: readonly ReplicaStatus[];
  allReady: boolean;
  failed: readonly ReplicaOutcome[];
  /** Static endpoints (no EndpointSlice events wake the object). */
  staticEndpoints: boolean;
  /** The gate the conditions speak of. */
  gate: Gate;
  /** When Ready last changed (the poll's back-off starts there when no replica is being polled). */
  readySince: string | undefined;
  pollBackoffStart: number;
  pollBackoffMax: number;
  now: number;
  /** In [0, 1): the jitter of slow re-checks. */
  random: number;
  /** A Staged rollout that holds by itself until the spec or its retry annotation changes (rolled back, paused):
   *  those changes wake the object, so its held replicas are not polled. */
  rolloutHeld?: boolean | undefined;
}

/** When to look again: soon while converging (less often the longer it takes), rarely when done. */
export function nextLook(i: LookInput): ReconcileResult | undefined {
  const jittered = (ms: number) => ms * (0.8 + i.random * 0.4);
  const registering = i.replicas.some((r) => r.phase === 'Pending' || r.phase === 'Downloading');
  if (i.allReady && i.failed.length === 0)
    return i.staticEndpoints ? { requeueAfter: jittered(STATIC_RECHECK_MS) } : undefined;
  if (i.gate.state === 'closed' && i.gate.final) return undefined;
  if (i.rolloutHeld) return { requeueAfter: jittered(STALLED_RECHECK_MS) };
  // Every failure needs a change of the spec, the archive or the model server (a rejected archive, a version
  // mismatch): asking again at poll rate cannot help; a spec or endpoint change wakes the object, and a slow
  // re-check notices a fixed model server. Refused credentials stay on the poll: the Secret, which nothing
  // watches, is republished by the key sidecar on rotation.
  if (i.failed.length > 0 && i.failed.every(needsChange) && !registering)
    return { requeueAfter: jittered(STALLED_RECHECK_MS) };
  // While registrations run, each one's end enqueues the object, and those passes see the workers that start
  // meanwhile: polling then would only add passes (each describes every replica). Otherwise the replicas whose
  // workers are starting are polled soon after they entered that phase, less often the longer it takes.
  if (registering) return { requeueAfter: i.pollBackoffMax };
  const polled = i.replicas.filter((r) => !r.ready && r.since !== undefined);
  const since =
    polled.length > 0
      ? Math.max(...polled.map((r) => Date.parse(r.since!)))
      : i.readySince !== undefined
        ? Date.parse(i.readySince)
        : i.now;
  return { requeueAfter: Math.min(i.pollBackoffMax, Math.max(i.pollBackoffStart, (i.now - since) / 4)) };
}

/** The next look of a pass whose write waits for the coalescing interval (the poll does not wait). */
export function coalescedLook(
  look: ReconcileResult | undefined,
  sinceWriteMs: number,
  wakeInMs: number,
): ReconcileResult {
  return {
    requeueAfter: Math.min(look?.requeueAfter ?? Infinity, STATUS_COALESCE_MS - sinceWriteMs, wakeInMs),
  };
}

/** A pass with a wake-up of its own (a batch window, a replica's wait bound) looks again by then at the latest. */
export function withWake(look: ReconcileResult | undefined, wakeInMs: number): ReconcileResult | undefined {
  return Number.isFinite(wakeInMs)
    ? { requeueAfter: Math.min(look?.requeueAfter ?? Infinity, wakeInMs) }
    : look;
}

/**
 * Whether an ended registration is kept once status holds it, rather than settled (forgotten, so a later pass
 * registers again): one whose outcome needs a change (a version mismatch, a rejected archive) stays as it ended
 * until a new spec (another registration key) or the slow re-check after STALLED_RECHECK_MS.
 */
export function keepRegistration(
  outcome: ReplicaOutcome,
  ended: EndedRegistration,
  now: number,
  backoffStartMs: number,
): boolean {
  if (outcome.failure?.reason === ReplicaFailureReason.ChecksumMismatch && ended.state === 'failed')
    return now - ended.since < integrityBackoff(ended.failures ?? 1, backoffStartMs);
  return needsChange(outcome) && now - ended.since < STALLED_RECHECK_MS;
}

/**
 * How long a placement whose bytes were not their digest waits before it is retried, after `failures` in a row:
 * doubling from `startMs` up to STALLED_RECHECK_MS. Each retry reads the file again (from the origin, under a fresh
 * task: src/place/refetch.ts), so an origin that keeps serving other bytes is not read at poll rate.
 */
export function integrityBackoff(failures: number, startMs: number): number {
  return Math.min(STALLED_RECHECK_MS, startMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}

const find = (conditions: readonly Condition[], type: string) => conditions.find((c) => c.type === type);

/**
 * The Events of what a status write changed. Ready turning True: Normal `Ready`; turning False: Warning `NotReady`
 * (a replica lost the model or fails: someone may need to look). Replicas being added while Ready stays True:
 * Normal `ScalingOut` when it starts and Normal `ScaledOut` when every replica is READY, so an autoscaler's steps
 * raise no Warning.
 */
export function statusEvents(before: readonly Condition[], after: readonly Condition[]): ReplicaEvent[] {
  const [was, now] = [find(before, 'Ready'), find(after, 'Ready')];
  const scaling = (cs: readonly Condition[]) => find(cs, 'Reconciling')?.reason === 'ScalingOut';
  if (now?.status === 'True' && was?.status !== 'True')
    return [{ type: 'Normal', reason: 'Ready', note: now.message ?? '' }];
  if (now?.status !== 'True' && was?.status === 'True')
    return [{ type: 'Warning', reason: 'NotReady', note: now?.message ?? '' }];
  if (now?.status !== 'True') return [];
  const reconciling = find(after, 'Reconciling');
  if (scaling(after) && !scaling(before))
    return [{ type: 'Normal', reason: 'ScalingOut', note: reconciling?.message ?? '' }];
  if (!scaling(after) && scaling(before))
    return [{ type: 'Normal', reason: 'ScaledOut', note: now.message ?? '' }];
  return [];
}
