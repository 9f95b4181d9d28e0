/**
 * What a ModelPreheat's status says, from what the controller observed: its conditions (kstatus and the
 * Kubernetes API conventions) and the `phase` that `kubectl get` shows. Pure, so every case is unit-tested.
 *
 * - `Ready` (True once the job succeeded) is what `kubectl wait` and the ServedModel preheat gate read;
 *   `Succeeded` says the same with the older semantics (Unknown while open, False only when final) and stays
 *   for existing users.
 * - `Reconciling` is True while work is in progress, `Stalled` is True when nothing will progress without a
 *   change (a final job failure, an invalid spec, credentials the manager refuses). Both are "abnormal-true":
 *   they are removed, not set False, when they no longer apply, as kstatus readers (Flux, kpt) expect.
 */
import type { JobState, PREHEAT_PHASES } from '../../api/index.ts';
import type { ConditionChange } from '../../runtime/index.ts';
import type { FailureReason } from './failures.ts';
import { withConditionsOf } from '../status.ts';

export const PreheatCondition = {
  Ready: 'Ready',
  Succeeded: 'Succeeded',
  Reconciling: 'Reconciling',
  Stalled: 'Stalled',
} as const;

/** Reasons the ModelPreheat controller itself decides (failures of the manager are named in modelpreheat-failures). */
export const PreheatReason = {
  InvalidSpec: 'InvalidSpec',
  JobCreated: 'JobCreated',
  JobRunning: 'JobRunning',
  JobSucceeded: 'JobSucceeded',
  JobFailed: 'JobFailed',
  /** The manager said SUCCESS, but no peer reported the content (the real manager's answer to an origin 404). */
  NoPeerSucceeded: 'NoPeerSucceeded',
  /** Every targeted peer held the content already (spec.targets.ips): no job was needed. */
  AlreadyPreheated: 'AlreadyPreheated',
  JobFailedWillRetry: 'JobFailedWillRetry',
  ManagerUnavailable: 'ManagerUnavailable',
  ManagerRateLimited: 'ManagerRateLimited',
} as const;

type ValueOf<T> = T[keyof T];
export type PreheatConditionType = ValueOf<typeof PreheatCondition>;
/** Every reason a ModelPreheat condition can give: the controller's own and a failed step's. */
export type PreheatConditionReason = ValueOf<typeof PreheatReason> | FailureReason;
/** One change of a ModelPreheat's conditions: only its own types and reasons compile. */
export type PreheatConditionChange = ConditionChange<PreheatConditionType, PreheatConditionReason>;
/** Applies ModelPreheat condition changes to its status. */
export const withPreheatConditions = withConditionsOf<PreheatConditionType, PreheatConditionReason>();

/**
 * - `Succeeded`: the job of this generation succeeded.
 * - `Progressing`: work is under way or will be retried by itself (job running, retry pending, manager down).
 * - `Blocked`: the operator keeps trying, but only a change (a Secret, credentials) can make it succeed.
 * - `Failed`: final for this generation (retries exhausted, a request the manager rejects, invalid spec).
 */
export type PreheatOutcome = 'Succeeded' | 'Progressing' | 'Blocked' | 'Failed';

export interface PreheatObservation {
  outcome: PreheatOutcome;
  /** Distinct per cause. */
  reason: PreheatConditionReason;
  /** Names the cause; never a secret. */
  message: string;
  /** The manager job's state, when a job of this generation exists. */
  jobState?: JobState | undefined;
}

/** The STATE column (status.phase): the manager job's state, or what stands between the resource and a job. */
export type PreheatPhase = (typeof PREHEAT_PHASES)[number];

export function preheatPhase(o: PreheatObservation): PreheatPhase {
  switch (o.outcome) {
    case 'Succeeded':
      return 'SUCCESS';
    case 'Failed':
      // FAILURE is a job's outcome; refused before any job ran (spec, manager configuration, 422) is BLOCKED.
      return o.reason === PreheatReason.JobFailed ? 'FAILURE' : 'BLOCKED';
    case 'Blocked':
      return 'BLOCKED';
    case 'Progressing':
      if (o.reason === PreheatReason.JobFailedWillRetry) return 'RETRYING';
      if (o.reason === PreheatReason.ManagerUnavailable) return 'UNREACHABLE';
      // The manager's job rate limit is its normal pace, not an outage: the job is waiting for its turn.
      if (o.reason === PreheatReason.ManagerRateLimited) return 'PENDING';
      return o.jobState && o.jobState !== 'FAILURE' ? o.jobState : 'PENDING';
  }
}

/** The condition changes for one observation, to apply with `applyConditions`. */
export function preheatConditions(o: PreheatObservation): PreheatConditionChange[] {
  const { reason, message } = o;
  const { Ready, Succeeded, Reconciling, Stalled } = PreheatCondition;
  switch (o.outcome) {
    case 'Succeeded':
      return [
        { type: Ready, status: 'True', reason, message },
        { type: Succeeded, status: 'True', reason, message },
        { type: Reconciling, absent: true },
        { type: Stalled, absent: true },
      ];
    case 'Progressing':
      return [
        { type: Ready, status: 'Unknown', reason, message },
        { type: Succeeded, status: 'Unknown', reason, message },
        { type: Reconciling, status: 'True', reason, message },
        { type: Stalled, absent: true },
      ];
    case 'Blocked':
      return [
        { type: Ready, status: 'False', reason, message },
        // Still open: the controller retries, and a fixed Secret lets the same generation succeed.
        { type: Succeeded, status: 'Unknown', reason, message },
        { type: Reconciling, absent: true },
        { type: Stalled, status: 'True', reason, message },
      ];
    case 'Failed':
      return [
        { type: Ready, status: 'False', reason, message },
        { type: Succeeded, status: 'False', reason, message },
        { type: Reconciling, absent: true },
        { type: Stalled, status: 'True', reason, message },
      ];
  }
}
