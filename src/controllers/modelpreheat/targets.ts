/**
 * Node-targeted preheats (spec.targets.ips, scope all_peers): which targeted peers still need the content, and
 * what a job's results say about each. A peer that holds the content for the same spec (the content key) is never
 * preheated again when the targets change, e.g. as a ServedModel scales out onto new nodes.
 */
import { redactBounded } from '../../redact.ts';
import { createHash } from 'node:crypto';
import type { ModelPreheatSpec, TargetPeer } from '../../api/index.ts';
import { jobPeerTasks, type ManagerJob } from '../../manager/types.ts';

/** Most peers status.peers remembers (the manager takes at most 100 ips per job; a few batches' worth). */
const MAX_TARGET_PEERS = 200;

/**
 * A digest of what is preheated: the spec without the fields that say where or how (targets, scope, retry,
 * clean-up, time-out, manager), and for a source the commit it resolved to (a moved branch is other content).
 * Peers preheated under one key hold the same tasks.
 */
export function contentKey(spec: ModelPreheatSpec, commit?: string): string {
  const what = {
    type: spec.type,
    url: spec.url,
    urls: spec.urls,
    objectStorage: spec.objectStorage,
    source: spec.source,
    commit,
    filteredQueryParams: spec.filteredQueryParams,
    headers: spec.headers,
    platform: spec.platform,
    tag: spec.tag,
    application: spec.application,
    pieceLength: spec.pieceLength,
    peerDaemonVersion: spec.peerDaemonVersion,
    schedulerClusterIDs: spec.schedulerClusterIDs,
  };
  return createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 16);
}

/** What a ModelPreheat's status remembers of its targeted peers. */
export interface PeersStatus {
  contentKey?: string | undefined;
  peers?: TargetPeer[] | undefined;
}

/** The peers status carries over for `key`: none when the content changed. */
export function carriedPeers(status: PeersStatus | undefined, key: string): TargetPeer[] {
  return status?.contentKey === key ? (status.peers ?? []) : [];
}

/** Targeted IPs that do not hold the content yet (a failed one is tried again). */
export function remainingTargets(ips: readonly string[], carried: readonly TargetPeer[]): string[] {
  const done = new Set(carried.filter((p) => p.state === 'Preheated').map((p) => p.ip));
  return ips.filter((ip) => !done.has(ip));
}

/**
 * The IPs a new job of a targeted preheat names: the targets that do not hold this content yet (by the peers
 * `status` carries). Undefined for an untargeted preheat; empty when every target holds the content (no job needed).
 */
export function targetsToPreheat(
  spec: ModelPreheatSpec,
  status: PeersStatus | undefined,
): string[] | undefined {
  const ips = spec.targets?.ips;
  return ips ? remainingTargets(ips, carriedPeers(status, contentKey(spec))) : undefined;
}

/**
 * status.peers after a job of a targeted preheat, from the status the job started from (`status`): the outcome for
 * each IP the job targeted, the peers carried before after them. Nothing for an untargeted preheat.
 */
export function targetOutcomes(
  spec: ModelPreheatSpec,
  status: PeersStatus,
  job: ManagerJob | undefined,
  failure?: string,
): { peers?: TargetPeer[] } {
  const ips = spec.targets?.ips;
  if (!ips) return {};
  const carried = carriedPeers(status, contentKey(spec));
  return { peers: mergePeerOutcomes(carried, remainingTargets(ips, carried), job, failure) };
}

/**
 * `carried` updated with a job's outcome for the IPs it targeted: Preheated where the peer reported success,
 * Failed with its words where it reported failure, Failed as unknown where the job says nothing of the IP (the
 * scheduler knows no peer there: the real manager skips such IPs silently, or fails the whole job when none is
 * known). Newest first, bounded.
 */
export function mergePeerOutcomes(
  carried: readonly TargetPeer[],
  targeted: readonly string[],
  job: ManagerJob | undefined,
  jobFailure?: string,
): TargetPeer[] {
  const { success, failure } = job ? jobPeerTasks(job) : { success: [], failure: [] };
  const outcome = new Map<string, TargetPeer>();
  for (const ip of targeted) {
    const ok = success.find((t) => t.ip === ip);
    const bad = failure.find((t) => t.ip === ip);
    const base = { ip, ...(job ? { jobID: job.id } : {}) };
    if (ok && !bad)
      outcome.set(ip, { ...base, ...(ok.hostname ? { hostname: ok.hostname } : {}), state: 'Preheated' });
    else if (bad)
      outcome.set(ip, {
        ...base,
        ...(bad.hostname ? { hostname: bad.hostname } : {}),
        state: 'Failed',
        message: redactBounded(bad.description ?? 'failed', 1024),
      });
    else
      outcome.set(ip, {
        ...base,
        state: 'Failed',
        message: redactBounded(
          jobFailure ?? 'the scheduler knows no peer at this IP (is a peer daemon running on that node?)',
          1024,
        ),
      });
  }
  const rest = carried.filter((p) => !outcome.has(p.ip));
  return [...outcome.values(), ...rest].slice(0, MAX_TARGET_PEERS);
}
