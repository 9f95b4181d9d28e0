/**
 * What a ServedModel's conditions say, from what one reconcile pass observed (the preheat gate, the replicas
 * found and how each one fared). Pure, so every case is unit-tested.
 *
 * - `Ready`: True when the model is READY on every replica; when not, its reason names the cause. Once True for the
 *   generation, it stays True while replicas are added (a scale-out, reason `ScalingOut`): every replica that had
 *   the model READY still has it, none fails, and the new ones are on their way. A replica that lost the model or
 *   fails turns it False. (Like a Deployment's `Available` during a scale-out: what served still serves.)
 * - `Reconciling` (True while the rollout progresses or retries by itself, a scale-out included) and `Stalled` (True
 *   when nothing will progress without a change: preheat failed for good, the Service or its port missing,
 *   credentials refused, an archive the model server rejects) follow kstatus; both are removed, not set False,
 *   when they do not apply.
 * - `Degraded` (which replicas fail and why) and `Preheated` (the gate) are peerload's own.
 */
import type { ConditionChange } from '../../runtime/index.ts';
import type { Gate, GateReason } from './preheat.ts';
import type { CredentialReachReason } from '../../policy/reach.ts';
import type { SourceReason } from '../../sources/index.ts';
import { withConditionsOf } from '../status.ts';

export const ServedModelCondition = {
  Ready: 'Ready',
  Reconciling: 'Reconciling',
  Stalled: 'Stalled',
  Degraded: 'Degraded',
  Preheated: 'Preheated',
} as const;

export const ServedModelReason = {
  InvalidSpec: 'InvalidSpec',
  AllReplicasReady: 'AllReplicasReady',
  Progressing: 'Progressing',
  /** Replicas are being added while every replica that had the model still has it (Ready stays True). */
  ScalingOut: 'ScalingOut',
  WaitingForPreheat: 'WaitingForPreheat',
  PreheatSucceeded: 'PreheatSucceeded',
  ServiceNotFound: 'ServiceNotFound',
  ServicePortNotFound: 'ServicePortNotFound',
  NoReadyReplicas: 'NoReadyReplicas',
  ReplicaFailures: 'ReplicaFailures',
  NoFailures: 'NoFailures',
  /** A static spec.modelServer.endpoints host is not in the operator's --allowed-endpoint-hosts (src/policy/reach.ts). */
  EndpointNotAllowed: 'EndpointNotAllowed',
  /** A spec.preheat.objectStorage host is not in the operator's --allowed-storage-hosts (src/policy/storage-reach.ts). */
  StorageEndpointNotAllowed: 'StorageEndpointNotAllowed',
  /** spec.modelServer.driver names no driver the operator has. */
  UnknownDriver: 'UnknownDriver',
  /** The model server's driver does not load the model's layout (a directory for TorchServe). */
  ModelLayoutUnsupported: 'ModelLayoutUnsupported',
  /** A spec.source whose token would go to a Hub outside the operator's --allowed-hub-hosts (src/sources). */
  HubNotAllowed: 'HubNotAllowed',
  /** spec.files: nothing under the prefix, more than the caps, or the list API failed. */
  DirectoryNotListed: 'DirectoryNotListed',
  /** A spec.source with registry credentials names a registry outside --allowed-registry-hosts (src/sources). */
  RegistryNotAllowed: 'RegistryNotAllowed',
  /** Being deleted: unregistering, or waiting for registrations under way or for unreachable replicas. */
  Deleting: 'Deleting',
  /** A Staged rollout put every replica back on the previous version (status.rollout says why). */
  RolledBack: 'RolledBack',
} as const;

/** Why one replica failed (replica.ts decides, from how the driver reads the model server's answer). */
export const ReplicaFailureReason = {
  /** The archive registers another version than spec.version. */
  VersionMismatch: 'VersionMismatch',
  ModelServerAuthFailed: 'ModelServerAuthFailed',
  ModelNotFound: 'ModelNotFound',
  Conflict: 'Conflict',
  RegistrationRejected: 'RegistrationRejected',
  ModelServerUnavailable: 'ModelServerUnavailable',
  /**
   * A placed file's bytes do not hash to the digest its source publishes (the message names the file or layer and
   * both digests). Retried with back-off, each retry under a fresh P2P task, so it heals once the origin serves the
   * published bytes.
   */
  ChecksumMismatch: 'ChecksumMismatch',
  /** An archive layer has an entry that would leave the model directory: the same archive fails again (Stalled). */
  UnsafeArchive: 'UnsafeArchive',
  /** Anything else (a bug, an unexpected answer). */
  ReplicaError: 'ReplicaError',
} as const;

type ValueOf<T> = T[keyof T];
export type ServedModelConditionType = ValueOf<typeof ServedModelCondition>;
export type ReplicaFailureReason = ValueOf<typeof ReplicaFailureReason>;
/** Every reason a ServedModel condition can give: the controller's own, the preheat gate's, a replica failure's. */
export type ServedModelConditionReason =
  ValueOf<typeof ServedModelReason> | GateReason | ReplicaFailureReason | SourceReason;
/** One change of a ServedModel's conditions: only its own types and reasons compile. */
export type ServedModelConditionChange = ConditionChange<
  ServedModelConditionType,
  ServedModelConditionReason
>;

/** Applies ServedModel condition changes to its status. */
export const withServedModelConditions = withConditionsOf<
  ServedModelConditionType,
  ServedModelConditionReason
>();

/** Gate reasons that need a change before the ServedModel can progress. */
const STALLING_GATES = new Set<GateReason>(['PreheatFailed', 'PreheatConflict', 'PreheatStalled']);

export interface ReplicaFailure {
  /** Pod name or endpoint. */
  replica: string;
  reason: ReplicaFailureReason;
  message: string;
  /** False: the same request will fail again until something changes (credentials, archive, model server). */
  retryable: boolean;
}

export interface ServedModelObservation {
  modelName: string;
  /** Set for Service discovery; undefined with static endpoints. */
  serviceName?: string | undefined;
  /** Whether any EndpointSlice of the Service exists (a Service with a selector always has one). */
  serviceFound: boolean;
  /** Why discovery found no replica when that is a configuration problem (e.g. no such port). */
  discoveryProblem?: string | undefined;
  gate: Gate;
  ready: number;
  desired: number;
  failures: readonly ReplicaFailure[];
  /** Whether the object's Ready condition was True for this generation before the pass (default false). */
  wasReady?: boolean | undefined;
  /** Replicas READY in the last reported status that are not READY now: they lost the model (default 0). */
  lost?: number | undefined;
}

/** How many failing replicas a message names. */
export const MAX_MESSAGE_REPLICAS = 3;

/** The condition changes for an invalid spec: nothing happens until it is fixed. */
export function invalidSpecConditions(message: string): ServedModelConditionChange[] {
  const reason = ServedModelReason.InvalidSpec;
  return [
    { type: ServedModelCondition.Ready, status: 'False', reason, message },
    { type: ServedModelCondition.Reconciling, absent: true },
    { type: ServedModelCondition.Stalled, status: 'True', reason, message },
  ];
}

/** The condition changes for endpoints the reach policy refuses: no replica is contacted until an admin or the spec
 *  changes. */
export function endpointNotAllowedConditions(
  message: string,
  reason: 'EndpointNotAllowed' | CredentialReachReason = ServedModelReason.EndpointNotAllowed,
): ServedModelConditionChange[] {
  return [
    { type: ServedModelCondition.Ready, status: 'False', reason, message },
    { type: ServedModelCondition.Reconciling, absent: true },
    { type: ServedModelCondition.Stalled, status: 'True', reason, message },
  ];
}

/** The condition changes for a model the server's driver cannot load: nothing happens until the spec changes. */
export function unsupportedModelConditions(message: string): ServedModelConditionChange[] {
  return stalledConditions(ServedModelReason.ModelLayoutUnsupported, message);
}

/** The condition changes for a spec.modelServer.driver the operator has no driver for. */
export function unknownDriverConditions(message: string): ServedModelConditionChange[] {
  return stalledConditions(ServedModelReason.UnknownDriver, message);
}

/** The condition changes for a directory without usable files (spec.files). */
export function directoryConditions(message: string): ServedModelConditionChange[] {
  return stalledConditions(ServedModelReason.DirectoryNotListed, message);
}

/**
 * The condition changes for a source that did not resolve: the registry's own reason (NotModelPack,
 * UnknownMediaType, Unauthorized, NotFound, SourceTooLarge...) naming the field and the layer, or the Hub's
 * (HubTokenRequired, HubRevisionNotFound, ...).
 */
export function sourceConditions(reason: SourceReason, message: string): ServedModelConditionChange[] {
  return stalledConditions(reason, message);
}

function stalledConditions(
  reason: ServedModelConditionReason,
  message: string,
): ServedModelConditionChange[] {
  return [
    { type: ServedModelCondition.Ready, status: 'False', reason, message },
    { type: ServedModelCondition.Reconciling, absent: true },
    { type: ServedModelCondition.Stalled, status: 'True', reason, message },
  ];
}

/** The conditions while being deleted: unregistering, or waiting for registrations or unreachable replicas. */
export function deletingConditions(message: string): ServedModelConditionChange[] {
  const reason = ServedModelReason.Deleting;
  return [
    { type: ServedModelCondition.Ready, status: 'False', reason, message },
    { type: ServedModelCondition.Reconciling, status: 'True', reason, message },
  ];
}

export function servedModelConditions(o: ServedModelObservation): ServedModelConditionChange[] {
  const { Ready, Reconciling, Stalled, Degraded } = ServedModelCondition;
  const R = ServedModelReason;
  const { gate, failures, ready, desired } = o;
  const out = preheatedCondition(gate);
  const failing = failingReplicas(failures, desired);
  out.push(
    failing
      ? { type: Degraded, status: 'True', ...failing }
      : { type: Degraded, status: 'False', reason: R.NoFailures, message: 'no replica is failing' },
  );

  // Not ready: why, and whether it will get there by itself (Reconciling) or needs a change (Stalled).
  const notReady = (
    reason: ServedModelConditionReason,
    message: string,
    stalled: boolean,
  ): ServedModelConditionChange[] => [
    { type: Ready, status: 'False', reason, message },
    stalled ? { type: Reconciling, absent: true } : { type: Reconciling, status: 'True', reason, message },
    stalled ? { type: Stalled, status: 'True', reason, message } : { type: Stalled, absent: true },
  ];
  const progress = `${o.modelName} is ready on ${ready}/${desired} replica(s)`;

  if (desired === 0) {
    if (o.discoveryProblem) return [...out, ...notReady(R.ServicePortNotFound, o.discoveryProblem, true)];
    if (o.serviceName !== undefined && !o.serviceFound)
      return [
        ...out,
        ...notReady(
          R.ServiceNotFound,
          `Service ${o.serviceName} not found (no EndpointSlice is labelled kubernetes.io/service-name=${o.serviceName}); create it or fix spec.modelServer.service.name`,
          true,
        ),
      ];
    const where = o.serviceName !== undefined ? `Service ${o.serviceName}` : 'spec.modelServer.endpoints';
    return [...out, ...notReady(R.NoReadyReplicas, `no ready endpoint behind ${where}`, false)];
  }
  if (scalingOut(o, failing !== undefined)) {
    const message = `${progress}; ${desired - ready} replica(s) being added`;
    return [
      ...out,
      { type: Ready, status: 'True', reason: R.ScalingOut, message },
      { type: Reconciling, status: 'True', reason: R.ScalingOut, message },
      { type: Stalled, absent: true },
    ];
  }
  if (gate.state === 'closed') {
    const stalled = STALLING_GATES.has(gate.reason);
    return [...out, ...notReady(stalled ? gate.reason : R.WaitingForPreheat, gate.message, stalled)];
  }
  if (failing) {
    // Stalled only when no failing replica can recover by itself (a dead pod is retried; refused keys are not).
    const stalled = failures.every((f) => !f.retryable);
    return [...out, ...notReady(failing.reason, `${progress}; ${failing.message}`, stalled)];
  }
  if (ready === desired)
    return [
      ...out,
      { type: Ready, status: 'True', reason: R.AllReplicasReady, message: progress },
      { type: Reconciling, absent: true },
      { type: Stalled, absent: true },
    ];
  return [...out, ...notReady(R.Progressing, progress, false)];
}

/**
 * The conditions of a Staged rollout that is rolling back or rolled back (`done`): Ready False and Degraded True with
 * reason RolledBack and status.rollout's message; rolled back, it is Stalled until a new generation or a new value
 * of the retry annotation. Replaces what the replicas alone would say.
 */
export function rolledBackConditions(
  conditions: readonly ServedModelConditionChange[],
  message: string,
  done: boolean,
): ServedModelConditionChange[] {
  const { Ready, Reconciling, Stalled, Degraded } = ServedModelCondition;
  const reason = ServedModelReason.RolledBack;
  const replaced = new Set<string>([Ready, Reconciling, Stalled, Degraded]);
  return [
    ...conditions.filter((c) => !replaced.has(c.type)),
    { type: Ready, status: 'False', reason, message },
    { type: Degraded, status: 'True', reason, message },
    done ? { type: Reconciling, absent: true } : { type: Reconciling, status: 'True', reason, message },
    done ? { type: Stalled, status: 'True', reason, message } : { type: Stalled, absent: true },
  ];
}

/** The `Preheated` condition of the gate (none without one). */
function preheatedCondition(gate: Gate): ServedModelConditionChange[] {
  const type = ServedModelCondition.Preheated;
  if (gate.state === 'open')
    return [{ type, status: 'True', reason: ServedModelReason.PreheatSucceeded, message: gate.message }];
  if (gate.state === 'closed')
    return [{ type, status: gate.final ? 'False' : 'Unknown', reason: gate.reason, message: gate.message }];
  return [];
}

/** What `Degraded` (and a Ready that is not True) say of failing replicas: their one reason, and up to 3 named. */
function failingReplicas(
  failures: readonly ReplicaFailure[],
  desired: number,
): { reason: ServedModelConditionReason; message: string } | undefined {
  if (failures.length === 0) return undefined;
  const sample = failures.slice(0, MAX_MESSAGE_REPLICAS).map((f) => `${f.replica}: ${f.message}`);
  const reasons = [...new Set(failures.map((f) => f.reason))];
  return {
    reason: reasons.length === 1 ? reasons[0]! : ServedModelReason.ReplicaFailures,
    message: `${failures.length} of ${desired} replica(s) failing: ${sample.join('; ')}`,
  };
}

/**
 * A scale-out: Ready was True for this generation, every replica that had the model READY still has it, none fails,
 * and the replicas not READY yet are new ones on their way (waiting for their node's preheat included, not a preheat
 * that failed for good).
 */
function scalingOut(o: ServedModelObservation, failing: boolean): boolean {
  if (!o.wasReady || failing || (o.lost ?? 0) > 0) return false;
  if (o.ready === 0 || o.ready >= o.desired) return false;
  return !(o.gate.state === 'closed' && STALLING_GATES.has(o.gate.reason));
}
