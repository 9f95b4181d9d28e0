/**
 * Which replicas of a ServedModel may register now: the preheat gate, per replica when the preheat targets the
 * replicas' nodes (preheat.targetNodes: each replica waits for its own node's peer, within preheat.maxWait), with
 * the owned ModelPreheats created and their targets kept in step with the nodes (new nodes batched over a window,
 * so nodes scheduled together share one job; at most 100 nodes per owned ModelPreheat, preheat-batches.ts). The
 * ServedModel controller asks once per pass.
 */
import {
  ownedPreheatName,
  ownedPreheatSpec,
  parseDuration,
  targetsNodes,
  type ModelPreheat,
  type ServedModel,
  type ServedModelSpec,
  type ServedModelStatus,
  type SourcePreheat,
} from '../../api/index.ts';
import type { Informer, KubeClient } from '../../runtime/index.ts';
import type { NodeAddresses } from './node-addresses.ts';
import type { Discovery, Replica } from './replicas.ts';
import {
  batchTargets,
  ensureOwnedPreheat,
  gateOf,
  GateReason,
  jobUnderway,
  preheatNameOf,
  preheatsOtherContent,
  replicaGate,
  type Gate,
  type ReplicaGate,
} from './preheat.ts';
import { assignBatches, batchPreheatName, combineGates, nodePreheatSummary } from './preheat-batches.ts';

type ReplicaStatus = NonNullable<ServedModelStatus['replicas']>[number];

export interface ReplicaGating {
  /** The ServedModel's preheat gate as a whole (a foreign object in the way of the owned preheat closes it). */
  gate: Gate;
  /** The ModelPreheat the gate reads, when there is one (with node targeting, the first batch's). */
  preheat: ModelPreheat | undefined;
  /** Whether each replica waits for its own node's peer (preheat.targetNodes). */
  nodeTargeting: boolean;
  /** InternalIP by node name, for the replicas' nodes (empty without node targeting). */
  nodeIPs: Map<string, string>;
  /** Each replica's gate, by endpoint. */
  gates: Map<string, ReplicaGate>;
  /** The replicas whose gate is closed. */
  closed: Replica[];
  /** What the conditions say of the gate: with node targeting, of the replicas' gates, not the preheat's. */
  conditionGate: Gate;
  /** With node targeting: the nodes' preheat in counts (status.nodePreheat). */
  nodePreheat?: ServedModelStatus['nodePreheat'];
  /** When the pass must look again for a reason of its own (the batch window, a replica's wait bound). */
  wakeInMs: number;
}

export interface ReplicaGatesDeps {
  kube: KubeClient;
  preheats: Informer<ModelPreheat>;
  nodeAddresses: NodeAddresses;
  /** How long new nodes wait to share one node-targeted preheat job. */
  batchWindowMs: number;
}

/** Most batches (owned ModelPreheats of 100 nodes) one ServedModel has: 10,000 nodes. */
const MAX_BATCHES = 100;

export class ReplicaGates {
  private readonly deps: ReplicaGatesDeps;
  /** Per ServedModel: when nodes not yet targeted by its preheat were first seen (the batch window). */
  private readonly untargetedSince = new Map<string, number>();

  constructor(deps: ReplicaGatesDeps) {
    this.deps = deps;
  }

  /**
   * The gates of one pass over `discovery`'s replicas; `previous` is the last reported status of each replica (by
   * endpoint), whose Pending `since` starts its wait bound. Creates or updates the owned ModelPreheats.
   */
  async of(
    key: string,
    sm: ServedModel,
    spec: ServedModelSpec,
    discovery: Discovery,
    previous: ReadonlyMap<string, ReplicaStatus>,
    signal: AbortSignal,
    source?: SourcePreheat,
  ): Promise<ReplicaGating> {
    if (!targetsNodes(spec)) return this.whole(sm, spec, discovery, signal, source);
    // Pods still starting count: their nodes are warmed up before their model servers ask for the model.
    const nodeIPs = await this.deps.nodeAddresses.internalIPs([
      ...discovery.replicas.flatMap((r) => (r.node ? [r.node] : [])),
      ...discovery.startingNodes,
    ]);
    const { batches, targets, conflict, changed, wakeInMs } = await this.ensureBatches(
      key,
      sm,
      spec,
      nodeIPs,
      signal,
      source,
    );
    const namespace = sm.metadata.namespace!;
    const batchGates = targets.map((_, i) =>
      changed[i]
        ? updatedGate(batchPreheatName(sm, i))
        : gateOf(batchPreheatName(sm, i), namespace, this.deps.preheats),
    );
    const gate = conflict
      ? conflictGate(ownedPreheatName(sm), conflict)
      : combineGates(batchGates, ownedPreheatName(sm));
    const batchOf = new Map(targets.flatMap((ips, i) => (ips ?? []).map((ip) => [ip, i] as const)));
    const maxWaitMs = parseDuration(spec.preheat?.maxWait ?? '5m');
    let wake = wakeInMs;
    const gates = new Map<string, ReplicaGate>(
      discovery.replicas.map((r) => {
        const prev = previous.get(r.endpoint);
        const since = prev?.phase === 'Pending' && prev.since ? Date.parse(prev.since) : Date.now();
        const nodeIP = r.node ? nodeIPs.get(r.node) : undefined;
        const i = (nodeIP && batchOf.get(nodeIP)) || 0;
        // A batch whose content just changed: its cached peers hold the content before, not this one.
        const g = replicaGate(
          conflict ? gate : batchGates[i]!,
          changed[i] ? undefined : batches[i],
          nodeIP,
          since,
          maxWaitMs,
          Date.now(),
        );
        if (!g.open) wake = Math.min(wake, Math.max(1_000, since + maxWaitMs - Date.now()));
        return [r.endpoint, g];
      }),
    );
    const closed = discovery.replicas.filter((r) => !gates.get(r.endpoint)!.open);
    return {
      gate,
      preheat: changed[0] ? undefined : batches[0],
      nodeTargeting: true,
      nodeIPs,
      gates,
      closed,
      conditionGate: replicasGate(gate, closed, discovery.replicas.length, gates),
      nodePreheat: nodePreheatSummary(batches.filter((b): b is ModelPreheat => b !== undefined)),
      wakeInMs: wake,
    };
  }

  /** Drops the batch window of an object that is gone. */
  forget(key: string): void {
    this.untargetedSince.delete(key);
  }

  /**
   * Without node targeting: one gate for every replica, the named or owned ModelPreheat's, open once its job for
   * this content is underway (or it succeeded).
   */
  private async whole(
    sm: ServedModel,
    spec: ServedModelSpec,
    discovery: Discovery,
    signal: AbortSignal,
    source?: SourcePreheat,
  ): Promise<ReplicaGating> {
    const { kube, preheats } = this.deps;
    const namespace = sm.metadata.namespace!;
    let gate = gateOf(preheatNameOf(sm, spec), namespace, preheats);
    let otherContent = false;
    if (spec.preheat?.create) {
      const existing = preheats.getByName(namespace, ownedPreheatName(sm));
      const ensured = await ensureOwnedPreheat(kube, sm, spec, existing, [], signal, undefined, source);
      otherContent =
        'contentChanged' in ensured &&
        (!existing ||
          ensured.contentChanged ||
          preheatsOtherContent(existing, ownedPreheatSpec(spec, [], source)));
      if ('blocked' in ensured) gate = conflictGate(ownedPreheatName(sm), ensured.blocked);
      else if (existing && otherContent) gate = updatedGate(ownedPreheatName(sm));
    }
    if (gate.state !== 'none')
      gate = underwayGate(gate, otherContent, preheats.getByName(namespace, gate.preheatName));
    // The content before's preheat says nothing of this one: neither its success nor its preheated peers count.
    const stale =
      gate.state === 'closed' && gate.reason === GateReason.PreheatInProgress && spec.preheat?.create;
    const preheat =
      gate.state === 'none' || stale ? undefined : preheats.getByName(namespace, gate.preheatName);
    const g: ReplicaGate =
      gate.state === 'closed' ? { open: false, message: gate.message } : { open: true, message: '' };
    return {
      gate,
      preheat,
      nodeTargeting: false,
      nodeIPs: new Map(),
      gates: new Map(discovery.replicas.map((r) => [r.endpoint, g])),
      closed: g.open ? [] : discovery.replicas,
      conditionGate: gate,
      wakeInMs: Infinity,
    };
  }

  /**
   * The owned ModelPreheats of a node-targeted ServedModel, one per batch of at most 100 node IPs, created or
   * updated: new nodes wait for the batch window (when some are targeted already), then fill the batches.
   */
  private async ensureBatches(
    key: string,
    sm: ServedModel,
    spec: ServedModelSpec,
    nodeIPs: ReadonlyMap<string, string>,
    signal: AbortSignal,
    source?: SourcePreheat,
  ): Promise<{
    batches: (ModelPreheat | undefined)[];
    targets: (readonly string[] | undefined)[];
    conflict: string | undefined;
    /** Per batch: its spec now names other content than the cached object's (a new version's files). */
    changed: boolean[];
    wakeInMs: number;
  }> {
    const { kube, preheats, batchWindowMs } = this.deps;
    const namespace = sm.metadata.namespace!;
    const batches: (ModelPreheat | undefined)[] = [preheats.getByName(namespace, batchPreheatName(sm, 0))];
    for (let i = 1; i < MAX_BATCHES; i++) {
      const b = preheats.getByName(namespace, batchPreheatName(sm, i));
      if (!b) break;
      batches.push(b);
    }
    const current: (readonly string[] | undefined)[] = batches.map((b) => b?.spec?.targets?.ips);
    const desired = [...new Set(nodeIPs.values())];
    const held = current.flatMap((ips) => ips ?? []);
    const now = Date.now();
    const timing = batchTargets(held, desired, this.untargetedSince.get(key), batchWindowMs, now);
    let targets = current;
    let wakeInMs = Infinity;
    if ('waitMs' in timing) {
      if (!this.untargetedSince.has(key)) this.untargetedSince.set(key, now);
      wakeInMs = timing.waitMs;
    } else {
      this.untargetedSince.delete(key);
      if ('ips' in timing) targets = assignBatches(current, desired);
    }
    let conflict: string | undefined;
    const changed = targets.map(() => false);
    for (const [i, ips] of targets.entries()) {
      const name = batchPreheatName(sm, i);
      const ensured = await ensureOwnedPreheat(kube, sm, spec, batches[i], ips ?? [], signal, name, source);
      if ('blocked' in ensured) conflict ??= ensured.blocked;
      // This pass replaced its content, or the cache still holds the content before (its spec, or a status the
      // preheat controller wrote of it): either way its success and peers are not this content's.
      else
        changed[i] =
          batches[i] !== undefined &&
          (ensured.contentChanged || preheatsOtherContent(batches[i]!, ownedPreheatSpec(spec, [], source)));
    }
    return { batches, targets, conflict, changed, wakeInMs };
  }
}

/**
 * A preheat in progress whose job for this content is underway opens the gate: downloads join the job's task, and
 * the origin is still read once (jobUnderway says why), without waiting the manager's next state sync for SUCCESS.
 */
function underwayGate(gate: Gate, otherContent: boolean, preheat: ModelPreheat | undefined): Gate {
  if (gate.state !== 'closed' || gate.reason !== GateReason.PreheatInProgress || otherContent || !preheat)
    return gate;
  const job = jobUnderway(preheat);
  if (job === undefined) return gate;
  return {
    state: 'open',
    preheatName: gate.preheatName,
    message: `ModelPreheat ${gate.preheatName}'s job ${job} is fetching the model: downloads join its task`,
  };
}

function conflictGate(preheatName: string, message: string): Gate {
  return { state: 'closed', preheatName, reason: GateReason.PreheatConflict, message, final: true };
}

/**
 * An owned ModelPreheat whose spec this pass replaced with other content (a new version's files): the cached
 * object still says the content before succeeded, which is not this content's success.
 */
function updatedGate(preheatName: string): Gate {
  return {
    state: 'closed',
    preheatName,
    reason: GateReason.PreheatInProgress,
    message: `waiting for ModelPreheat ${preheatName} to preheat this generation's model (it holds the previous one)`,
    final: false,
  };
}

/** What the conditions say with node targeting: of the replicas' gates, not of the preheats as a whole. */
function replicasGate(
  gate: Gate,
  closed: readonly Replica[],
  replicas: number,
  gates: ReadonlyMap<string, ReplicaGate>,
): Gate {
  if (gate.state !== 'closed') return gate;
  if (closed.length === 0)
    return {
      state: 'open',
      preheatName: gate.preheatName,
      message: `every replica's node was preheated, is being preheated or was waited for (${gate.message})`,
    };
  return {
    ...gate,
    final: false,
    message: `${closed.length} of ${replicas} replica(s) waiting for their node's preheat: ${gates.get(closed[0]!.endpoint)!.message}`,
  };
}
