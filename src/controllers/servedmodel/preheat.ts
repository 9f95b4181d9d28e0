/**
 * The preheat gate of a ServedModel: registration waits until a ModelPreheat has succeeded. The ModelPreheat is
 * either named (`preheat.name`) or created and owned by the ServedModel (`preheat.create`), in which case it
 * preheats `fileName` in the bucket with the filter the plugin's download will use, so the task ids match.
 */
import { pinnedResolution } from '../../sources/index.ts';
import {
  API_VERSION,
  ModelPreheatSpec,
  ownedPreheatName,
  ownedPreheatSpec,
  type ModelPreheat,
  type ServedModel,
  type ServedModelSpec,
  type SourcePreheat,
  type TargetPeer,
  GVR,
} from '../../api/index.ts';
import { getCondition, isAlreadyExists, type Informer, type KubeClient } from '../../runtime/index.ts';
import { isDeepStrictEqual } from 'node:util';
import { isTerminalState } from '../../manager/types.ts';
import { PreheatCondition } from '../modelpreheat/conditions.ts';
import { contentKey } from '../modelpreheat/targets.ts';

/** The label an owned ModelPreheat carries: the name of its ServedModel. */
export const SERVED_MODEL_LABEL = 'peerload.io/served-model';

/** Why a preheat gate is closed (the reason of the ServedModel's Preheated condition). */
export const GateReason = {
  PreheatNotFound: 'PreheatNotFound',
  PreheatInProgress: 'PreheatInProgress',
  PreheatFailed: 'PreheatFailed',
  PreheatStalled: 'PreheatStalled',
  /** The owned ModelPreheat's name is taken by an object the ServedModel does not own. */
  PreheatConflict: 'PreheatConflict',
} as const;
export type GateReason = (typeof GateReason)[keyof typeof GateReason];

export type Gate =
  | { state: 'none' }
  | { state: 'open'; preheatName: string; message: string }
  | { state: 'closed'; preheatName: string; reason: GateReason; message: string; final: boolean };

/** The ModelPreheat a ServedModel waits for, if any. */
export function preheatNameOf(sm: ServedModel, spec: ServedModelSpec): string | undefined {
  if (!spec.preheat) return undefined;
  return spec.preheat.create ? ownedPreheatName(sm) : spec.preheat.name;
}

/**
 * What {@link ensureOwnedPreheat} did: `blocked` a foreign object in the way; `contentChanged` the spec was created
 * or now names other content (a new version's files), so the cached ModelPreheat and its status still speak of
 * the content before. A change of targets alone (new nodes) is not one: the peers keep what they hold.
 */
export type EnsuredPreheat = { blocked: string } | { contentChanged: boolean };

/** Creates or updates the owned ModelPreheat. */
export async function ensureOwnedPreheat(
  kube: KubeClient,
  sm: ServedModel,
  spec: ServedModelSpec,
  existing: ModelPreheat | undefined,
  nodeIPs: readonly string[],
  signal?: AbortSignal,
  name: string = ownedPreheatName(sm),
  source?: SourcePreheat,
): Promise<EnsuredPreheat> {
  const desired = ownedPreheatSpec(spec, nodeIPs, source);
  const client = kube.resource<ModelPreheat>(GVR.modelPreheats);
  if (!existing) {
    await createUnlessCached(
      client,
      {
        apiVersion: API_VERSION,
        kind: 'ModelPreheat',
        metadata: {
          name,
          namespace: sm.metadata.namespace,
          labels: {
            'app.kubernetes.io/managed-by': 'peerload',
            [SERVED_MODEL_LABEL]: sm.metadata.name,
          },
          ownerReferences: [
            {
              apiVersion: API_VERSION,
              kind: 'ServedModel',
              name: sm.metadata.name,
              uid: sm.metadata.uid,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        },
        spec: desired,
      } as unknown as ModelPreheat,
      signal,
    );
    return { contentChanged: true };
  }
  const owner = existing.metadata.ownerReferences?.find((r) => r.controller === true);
  if (owner?.uid !== sm.metadata.uid) {
    return {
      blocked: `ModelPreheat ${name} exists and is not owned by this ServedModel; delete it or use preheat.name`,
    };
  }
  const stored = withDefaults(existing.spec, desired);
  if (isDeepStrictEqual(JSON.parse(JSON.stringify(existing.spec)), stored)) return { contentChanged: false };
  // Replace the whole spec: a merge patch could not remove fields the ServedModel no longer sets.
  await client.update({ ...existing, spec: desired as ModelPreheat['spec'] }, { signal });
  return { contentChanged: contentKeyOf(existing.spec) !== contentKeyOf(stored) };
}

/**
 * Creates `preheat`; an AlreadyExists answer is our own create of a pass before that the informer has not shown
 * yet (the cache is behind the apiserver), not a failure: its watch event queues the next pass, which sees the
 * object and checks its owner. Thrown instead, it would log a warning and back the ServedModel off for nothing.
 */
async function createUnlessCached(
  client: ReturnType<KubeClient['resource']>,
  preheat: ModelPreheat,
  signal: AbortSignal | undefined,
): Promise<void> {
  try {
    await client.create(preheat, { signal });
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

/**
 * The content key the ModelPreheat controller computes for a stored spec (undefined when it does not parse). An
 * owned preheat of a source names the commit as its revision, which is the commit the ModelPreheat's key holds.
 */
function contentKeyOf(spec: unknown): string | undefined {
  const parsed = ModelPreheatSpec.safeParse(spec);
  return parsed.success
    ? contentKey(parsed.data, parsed.data.source && pinnedResolution(parsed.data.source))
    : undefined;
}

/** `desired` with the defaults the apiserver filled into `actual`, so defaulting alone is not a difference. */
function withDefaults(actual: unknown, desired: unknown): unknown {
  if (!isObject(actual) || !isObject(desired)) return desired;
  const out: Record<string, unknown> = { ...desired };
  for (const [k, v] of Object.entries(actual)) {
    if (!(k in desired)) out[k] = v;
    else out[k] = withDefaults(v, desired[k]);
  }
  return out;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Whether the owned ModelPreheat, as the cache holds it, still speaks of other content than `desired` (the owned
 * spec of the ServedModel's generation): after a change of the archive or the files, the cache holds the previous
 * spec until the watch delivers the update, and until the preheat controller starts the new job its status (success,
 * preheated peers) is the previous content's. Read as is, it would open the gate, and the replicas would download
 * the new version before its preheat, each from the origin.
 */
export function preheatsOtherContent(preheat: ModelPreheat, desired: unknown): boolean {
  const want = contentKeyOf(desired);
  if (contentKeyOf(preheat.spec) !== want) return true;
  const said = preheat.status?.contentKey;
  return said !== undefined && said !== want;
}

/** Reads the gate from the ModelPreheat cache. */
export function gateOf(
  preheatName: string | undefined,
  namespace: string,
  preheats: Informer<ModelPreheat>,
): Gate {
  if (!preheatName) return { state: 'none' };
  const mph = preheats.getByName(namespace, preheatName);
  if (!mph) {
    return {
      state: 'closed',
      preheatName,
      reason: GateReason.PreheatNotFound,
      message: `ModelPreheat ${preheatName} not found`,
      final: false,
    };
  }
  const succeeded = getCondition(mph.status?.conditions, PreheatCondition.Succeeded);
  const stalled = getCondition(mph.status?.conditions, PreheatCondition.Stalled);
  const current = succeeded?.observedGeneration === mph.metadata.generation;
  if (current && succeeded?.status === 'True') {
    return {
      state: 'open',
      preheatName,
      message: `ModelPreheat ${preheatName} succeeded: ${succeeded.message}`,
    };
  }
  if (current && succeeded?.status === 'False') {
    return {
      state: 'closed',
      preheatName,
      reason: GateReason.PreheatFailed,
      message: `ModelPreheat ${preheatName} failed: ${succeeded.message}`,
      final: true,
    };
  }
  if (current && stalled?.status === 'True' && stalled.observedGeneration === mph.metadata.generation) {
    // Not final (the preheat controller keeps retrying), but it needs a fix: say so instead of "waiting".
    return {
      state: 'closed',
      preheatName,
      reason: GateReason.PreheatStalled,
      message: `ModelPreheat ${preheatName} is stalled: ${stalled.message}`,
      final: false,
    };
  }
  return {
    state: 'closed',
    preheatName,
    reason: GateReason.PreheatInProgress,
    message: `waiting for ModelPreheat ${preheatName}${succeeded?.message ? `: ${succeeded.message}` : ''}`,
    final: false,
  };
}

/** The gate of one replica when the owned preheat targets the replicas' nodes. */
export type ReplicaGate = { open: true; message: string } | { open: false; message: string };

/**
 * Node-targeted preheat (preheat.targetNodes): a replica registers as soon as ITS node's peer holds the model or
 * runs the preheat's job (jobRunningOn), or its preheat failed, or the whole preheat succeeded, or once it has
 * waited `maxWaitMs`; then it downloads anyway,
 * from the seed peers or the origin, which is never worse than without the preheat. A replica whose node is unknown
 * (a Node without addresses) registers once the preheat's job is underway (jobUnderway), or as above.
 */
export function replicaGate(
  gate: Gate,
  preheat: ModelPreheat | undefined,
  nodeIP: string | undefined,
  waitingSinceMs: number,
  maxWaitMs: number,
  now: number,
): ReplicaGate {
  if (gate.state === 'none') return { open: true, message: '' };
  if (gate.state === 'open') return { open: true, message: gate.message };
  const peer = nodeIP ? peersOfSpec(preheat).find((p) => p.ip === nodeIP) : undefined;
  if (peer?.state === 'Preheated') return { open: true, message: `node ${nodeIP} holds the model` };
  const job = nodeIP && preheat ? jobRunningOn(preheat, nodeIP) : undefined;
  if (job !== undefined)
    return {
      open: true,
      message: `node ${nodeIP}'s peer is fetching the model (preheat job ${job}): the download joins it`,
    };
  // A node the preheat cannot target: its peer joins the task the job's peers run (see jobUnderway).
  const anywhere = !nodeIP && preheat ? jobUnderway(preheat) : undefined;
  if (anywhere !== undefined)
    return {
      open: true,
      message: `preheat job ${anywhere} is fetching the model: the download joins its task`,
    };
  if (peer?.state === 'Failed')
    return {
      open: true,
      message: `preheat of node ${nodeIP} failed (${peer.message ?? 'no reason given'}): downloading anyway`,
    };
  if (gate.final) return { open: true, message: `${gate.message}: downloading anyway` };
  const waited = now - waitingSinceMs;
  if (waited >= maxWaitMs)
    return {
      open: true,
      message: `waited ${Math.round(waited / 1000)}s for the preheat: downloading anyway`,
    };
  return {
    open: false,
    message: nodeIP
      ? `waiting for node ${nodeIP}'s peer to be preheated (${gate.preheatName}; at most ${Math.round(maxWaitMs / 1000)}s)`
      : gate.message,
  };
}

/**
 * The job of `preheat` that runs on the peer at `nodeIP` now, if any: a job of the current generation, created and
 * not ended, whose targets name the IP. The job's task is then running on that peer, and a download through the
 * same peer joins it: the origin is read once (by the seed peer) and the download needs no job poll of the
 * manager's (which ends a job at its next poll only, 30 s after the create on v2.5.1).
 */
export function jobRunningOn(preheat: ModelPreheat, nodeIP: string): number | undefined {
  const job = jobUnderway(preheat);
  return job !== undefined && preheat.spec?.targets?.ips?.includes(nodeIP) ? job : undefined;
}

/**
 * The job of `preheat` that the manager has accepted for its current generation and not ended, if any. A download
 * of its content through any peer may start then, whatever the scope (as the real scheduler v2.5.1 and dfdaemon
 * 1.4.2 do it): a peer that registers the task while the job's peers run it gets them as parents (a seed peer is a
 * parent as soon as it registered); one that registers first makes the scheduler trigger the seed peer that the task
 * id hashes to, which is the very seed peer a `single_seed_peer` job picks (the same hash ring), and is among
 * `all_seed_peers`; and a daemon given the same task twice downloads each piece once (the second download waits for
 * the piece the first one claimed). The origin is read once if the seed peer registers the task within the
 * scheduler's back-to-source window (about 1.6 s with its stock values); when the origin's first answer is slower,
 * the peers that registered meanwhile read it too, as they would under the job alone (docs/dragonfly.md). Waiting
 * for the job's SUCCESS instead would wait for the manager's next state sync, 30 s after the create on v2.5.1.
 */
export function jobUnderway(preheat: ModelPreheat): number | undefined {
  const s = preheat.status;
  if (s?.jobID === undefined || s.jobGeneration !== preheat.metadata.generation) return undefined;
  if (s.state === undefined || isTerminalState(s.state)) return undefined;
  return s.jobID;
}

/**
 * The peers of `preheat`'s status that hold the content its spec names now: none while the status still speaks of
 * the content before a spec change (a new version's files), until the new content's job starts. Else a replica
 * would take its node's peer as holding the new version because it held the old one.
 */
export function peersOfSpec(preheat: ModelPreheat | undefined): readonly TargetPeer[] {
  const peers = preheat?.status?.peers;
  if (!peers) return [];
  const key = contentKeyOf(preheat.spec);
  return key !== undefined && preheat.status?.contentKey === key ? peers : [];
}

/**
 * The node IPs a ServedModel's owned preheat should target, batched: when nodes appear beside ones already
 * targeted, the update waits `windowMs` from the first sighting (the caller keeps it) so that nodes scheduled
 * together share one job. Nodes that left are dropped with the next addition only: a removal alone changes nothing
 * on the network. A node that comes back is not preheated again (the ModelPreheat remembers its peers).
 */
export function batchTargets(
  current: readonly string[] | undefined,
  desired: readonly string[],
  firstSeenMs: number | undefined,
  windowMs: number,
  now: number,
): { ips: string[] } | { waitMs: number } | { unchanged: true } {
  const have = new Set(current ?? []);
  if (desired.every((ip) => have.has(ip))) return { unchanged: true };
  if (!current || current.length === 0) return { ips: [...desired].sort() };
  const left = firstSeenMs === undefined ? windowMs : firstSeenMs + windowMs - now;
  return left > 0 ? { waitMs: left } : { ips: [...desired].sort() };
}
