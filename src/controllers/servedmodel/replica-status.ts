/**
 * A ServedModel's status as a function of the object and what one pass observed: each replica's status from its
 * step's outcome and its last reported status (read back from the object), and the counts and conditions over
 * them. Pure, so every case is unit-tested.
 */
import type { ServedModelStatus } from '../../api/index.ts';
import type { Discovery } from './replicas.ts';
import type { ReplicaOutcome } from './replica.ts';
import type { Gate } from './preheat.ts';
import { boundedRows } from './replica-rows.ts';
import { servedModelConditions, type ServedModelConditionChange } from './conditions.ts';

export type ReplicaStatus = NonNullable<ServedModelStatus['replicas']>[number];

/** The last reported status of each replica, by endpoint. */
export function previousReplicas(status: ServedModelStatus | undefined): Map<string, ReplicaStatus> {
  return new Map((status?.replicas ?? []).map((r) => [r.endpoint, r]));
}

/**
 * Whether the replica's download of the registered model was a hit on its node's peer cache: what the
 * registration that ended before this pass says (undefined: the plugin could not tell), else what the model server
 * said of a model no registration placed (vLLM's base model), else what status says already (the registration was
 * settled once a write held it). A replica without the model has none.
 */
export function localHitOf(
  outcome: ReplicaOutcome,
  previous: ReplicaStatus | undefined,
): boolean | undefined {
  if (!outcome.status.registered) return undefined;
  if (outcome.ended?.state === 'done') return outcome.ended.result.localHit;
  return outcome.status.localHit ?? previous?.localHit;
}

/** Keeps a replica's lastUpdateTime unless what a person reads (ready, message) changed, and `since` while the
 *  phase stays. */
export function stamp(status: ReplicaStatus, previous: ReplicaStatus | undefined, now: Date): ReplicaStatus {
  const same =
    previous &&
    previous.ready === status.ready &&
    previous.message === status.message &&
    previous.lastUpdateTime;
  const kept = previous?.phase === status.phase ? previous?.since : undefined;
  const since = kept ?? status.since ?? now.toISOString();
  return { ...status, since, lastUpdateTime: same ? previous.lastUpdateTime : now.toISOString() };
}

/** One replica's status: its outcome, where it runs, its local hit, stamped against what was reported. */
export function replicaStatus(
  outcome: ReplicaOutcome,
  node: string | undefined,
  nodeIP: string | undefined,
  previous: ReplicaStatus | undefined,
  now: Date,
): ReplicaStatus {
  const localHit = localHitOf(outcome, previous);
  return stamp(
    {
      ...outcome.status,
      ...(node ? { node } : {}),
      ...(nodeIP ? { nodeIP } : {}),
      ...(localHit !== undefined ? { localHit } : {}),
    },
    previous,
    now,
  );
}

export interface PassSummary {
  replicas: ReplicaStatus[];
  ready: number;
  desired: number;
  allReady: boolean;
  failed: ReplicaOutcome[];
  conditions: ServedModelConditionChange[];
}

export interface PassObservation {
  modelName: string;
  serviceName: string | undefined;
  serviceFound: boolean;
  discovery: Discovery;
  outcomes: readonly ReplicaOutcome[];
  previous: ReadonlyMap<string, ReplicaStatus>;
  nodeIPs: ReadonlyMap<string, string>;
  /** The gate the conditions speak of. */
  gate: Gate;
  /** Whether the object's Ready condition was True for this generation (a scale-out keeps it). */
  wasReady: boolean;
  now: Date;
}

/** The replicas' statuses, counts and conditions of one pass. */
export function summarize(o: PassObservation): PassSummary {
  const replicas = o.outcomes.map((outcome, i) => {
    const r = o.discovery.replicas[i]!;
    const nodeIP = r.node ? o.nodeIPs.get(r.node) : undefined;
    return replicaStatus(outcome, r.node, nodeIP, o.previous.get(outcome.status.endpoint), o.now);
  });
  const failed = o.outcomes.filter((x) => x.failure);
  const ready = replicas.filter((r) => r.ready).length;
  const desired = replicas.length;
  const lost = replicas.filter((r) => !r.ready && o.previous.get(r.endpoint)?.ready === true).length;
  const conditions = servedModelConditions({
    modelName: o.modelName,
    serviceName: o.serviceName,
    serviceFound: o.serviceFound,
    discoveryProblem: o.discovery.problem,
    gate: o.gate,
    ready,
    desired,
    wasReady: o.wasReady,
    lost,
    failures: failed.map((x) => ({
      replica: x.status.pod ?? x.status.endpoint,
      message: x.status.message ?? '',
      ...x.failure!,
    })),
  });
  return { replicas, ready, desired, allReady: desired > 0 && ready === desired, failed, conditions };
}

/** `s` with the pass's replicas and counts; the served version once every replica serves the same one. */
export function withReplicas(
  s: ServedModelStatus,
  summary: PassSummary,
  gate: Gate,
  cache: ServedModelStatus['cache'],
  nodePreheat?: ServedModelStatus['nodePreheat'],
): ServedModelStatus {
  const versions = new Set(summary.replicas.map((r) => r.version));
  return {
    ...s,
    replicas: boundedRows(summary.replicas),
    readyReplicas: summary.ready,
    desiredReplicas: summary.desired,
    ready: `${summary.ready}/${summary.desired}`,
    servedVersion: summary.allReady && versions.size === 1 ? [...versions][0] : s.servedVersion,
    preheatName: gate.state === 'none' ? undefined : gate.preheatName,
    nodePreheat,
    cache,
  };
}
