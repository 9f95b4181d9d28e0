/**
 * Which replicas of a ServedModel may register now: the preheat gate, per replica when the preheat targets the
 * replicas' nodes (preheat.targetNodes: each replica waits for its own node's peer, within preheat.maxWait), with
 * the owned ModelPreheat created and its targets kept in step with the nodes (new nodes batched over a window, so
 * nodes scheduled together share one job). The ServedModel controller asks once per pass.
 */
import {
  parseDuration,
  targetsNodes,
  type ModelPreheat,
  type ServedModel,
  type ServedModelSpec,
  type ServedModelStatus,
} from '../../api/index.ts';
import type { Informer, KubeClient } from '../../runtime/index.ts';
import type { NodeAddresses } from './node-addresses.ts';
import type { Discovery, Replica } from './replicas.ts';
import {
  batchTargets,
  ensureOwnedPreheat,
  gateOf,
  GateReason,
  preheatNameOf,
  replicaGate,
  type Gate,
  type ReplicaGate,
} from './preheat.ts';

type ReplicaStatus = NonNullable<ServedModelStatus['replicas']>[number];

export interface ReplicaGating {
  /** The ServedModel's preheat gate as a whole (a foreign object in the way of the owned preheat closes it). */
  gate: Gate;
  /** The ModelPreheat the gate reads, when there is one. */
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

export class ReplicaGates {
  private readonly deps: ReplicaGatesDeps;
  /** Per ServedModel: when nodes not yet targeted by its preheat were first seen (the batch window). */
  private readonly untargetedSince = new Map<string, number>();

  constructor(deps: ReplicaGatesDeps) {
    this.deps = deps;
  }

  /**
   * The gates of one pass over `discovery`'s replicas; `previous` is the last reported status of each replica (by
   * endpoint), whose Pending `since` starts its wait bound. Creates or updates the owned ModelPreheat.
   */
  async of(
    key: string,
    sm: ServedModel,
    spec: ServedModelSpec,
    discovery: Discovery,
    previous: ReadonlyMap<string, ReplicaStatus>,
    signal: AbortSignal,
  ): Promise<ReplicaGating> {
    const { preheats, nodeAddresses } = this.deps;
    const namespace = sm.metadata.namespace!;
    let gate = gateOf(preheatNameOf(sm, spec), namespace, preheats);
    const nodeTargeting = targetsNodes(spec);
    // Pods still starting count: their nodes are warmed up before their model servers ask for the model.
    const nodeIPs = nodeTargeting
      ? await nodeAddresses.internalIPs([
          ...discovery.replicas.flatMap((r) => (r.node ? [r.node] : [])),
          ...discovery.startingNodes,
        ])
      : new Map<string, string>();
    const owned = spec.preheat?.create
      ? await this.ensurePreheat(key, sm, spec, gate, nodeIPs, signal)
      : { gate, contentChanged: false, wakeInMs: Infinity };
    gate = owned.gate;
    const { contentChanged } = owned;
    let wakeInMs = owned.wakeInMs;

    const preheat = gate.state === 'none' ? undefined : preheats.getByName(namespace, gate.preheatName);
    const maxWaitMs = parseDuration(spec.preheat?.maxWait ?? '5m');
    const gates = new Map<string, ReplicaGate>(
      discovery.replicas.map((r) => {
        if (!nodeTargeting)
          return [
            r.endpoint,
            gate.state === 'closed' ? { open: false, message: gate.message } : { open: true, message: '' },
          ];
        const prev = previous.get(r.endpoint);
        const since = prev?.phase === 'Pending' && prev.since ? Date.parse(prev.since) : Date.now();
        const nodeIP = r.node ? nodeIPs.get(r.node) : undefined;
        // Just changed: the cached peers hold the content before, not this one.
        const g = replicaGate(
          gate,
          contentChanged ? undefined : preheat,
          nodeIP,
          since,
          maxWaitMs,
          Date.now(),
        );
        if (!g.open) wakeInMs = Math.min(wakeInMs, Math.max(1_000, since + maxWaitMs - Date.now()));
        return [r.endpoint, g];
      }),
    );
    const closed = discovery.replicas.filter((r) => !gates.get(r.endpoint)!.open);
    const conditionGate: Gate =
      nodeTargeting && gate.state === 'closed'
        ? closed.length === 0
          ? {
              state: 'open',
              preheatName: gate.preheatName,
              message: `every replica's node was preheated or waited for (${gate.message})`,
            }
          : {
              ...gate,
              final: false,
              message: `${closed.length} of ${discovery.replicas.length} replica(s) waiting for their node's preheat: ${gates.get(closed[0]!.endpoint)!.message}`,
            }
        : gate;
    return { gate, preheat, nodeTargeting, nodeIPs, gates, closed, conditionGate, wakeInMs };
  }

  /**
   * Creates or updates the owned ModelPreheat for this pass's nodes (new ones batched over the window). The gate
   * closes when the preheat now names other content (a new version): the cached object's success is the content's
   * before.
   */
  private async ensurePreheat(
    key: string,
    sm: ServedModel,
    spec: ServedModelSpec,
    gate: Gate,
    nodeIPs: ReadonlyMap<string, string>,
    signal: AbortSignal,
  ): Promise<{ gate: Gate; contentChanged: boolean; wakeInMs: number }> {
    const { kube, preheats, batchWindowMs } = this.deps;
    const namespace = sm.metadata.namespace!;
    const existing = preheats.getByName(namespace, gate.state === 'none' ? '' : gate.preheatName);
    const current = existing?.spec?.targets?.ips;
    const desiredIPs = [...new Set(nodeIPs.values())];
    const batch = batchTargets(current, desiredIPs, this.untargetedSince.get(key), batchWindowMs, Date.now());
    let targets = current ?? [];
    let wakeInMs = Infinity;
    if ('waitMs' in batch) {
      if (!this.untargetedSince.has(key)) this.untargetedSince.set(key, Date.now());
      wakeInMs = batch.waitMs;
    } else {
      this.untargetedSince.delete(key);
      if ('ips' in batch) targets = batch.ips;
    }
    const ensured = await ensureOwnedPreheat(kube, sm, spec, existing, targets, signal);
    const preheatName = (gate as { preheatName: string }).preheatName;
    if ('blocked' in ensured)
      return {
        gate: {
          state: 'closed',
          preheatName,
          reason: GateReason.PreheatConflict,
          message: ensured.blocked,
          final: true,
        },
        contentChanged: false,
        wakeInMs,
      };
    if (ensured.contentChanged && existing)
      return {
        gate: {
          state: 'closed',
          preheatName,
          reason: GateReason.PreheatInProgress,
          message: `waiting for ModelPreheat ${preheatName}: its spec was updated`,
          final: false,
        },
        contentChanged: true,
        wakeInMs,
      };
    return { gate, contentChanged: false, wakeInMs };
  }

  /** Drops the batch window of an object that is gone. */
  forget(key: string): void {
    this.untargetedSince.delete(key);
  }
}
