/**
 * Node-targeted preheats (spec.targets.ips, scope all_peers): which targeted peers still need the content, and
 * what a job's results say about each. A peer that holds the content for the same spec (the content key) is never
 * preheated again when the targets change, e.g. as a ServedModel scales out onto new nodes.
 */
import { createHash } from 'node:crypto';
import type { ModelPreheatSpec, TargetPeer } from '../api/index.ts';
import { jobPeerTasks, type ManagerJob } from '../manager/types.ts';

/** Most peers status.peers remembers (the manager takes at most 100 ips per job; a few batches' worth). */
export const MAX_TARGET_PEERS = 200;

/**
 * A digest of what is preheated: the spec without the fields that say where or how (targets, scope, retry,
 * clean-up, time-out, manager). Peers preheated under one key hold the same tasks.
 */
export function contentKey(spec: ModelPreheatSpec): string {
  const what = {
    type: spec.type,
    url: spec.url,
    urls: spec.urls,
    objectStorage: spec.objectStorage,
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

/** The peers status carries over for `key`: none when the content changed. */
export function carriedPeers(
  status: { contentKey?: string | undefined; peers?: TargetPeer[] | undefined } | undefined,
  key: string,
): TargetPeer[] {
  return status?.contentKey === key ? (status.peers ?? []) : [];
}

/** Targeted IPs that do not hold the content yet (a failed one is tried again). */
export function remainingTargets(ips: readonly string[], carried: readonly TargetPeer[]): string[] {
  const done = new Set(carried.filter((p) => p.state === 'Preheated').map((p) => p.ip));
  return ips.filter((ip) => !done.has(ip));
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
        message: (bad.description ?? 'failed').slice(0, 1024),
      });
    else
      outcome.set(ip, {
        ...base,
        state: 'Failed',
        message: (
          jobFailure ?? 'the scheduler knows no peer at this IP (is a peer daemon running on that node?)'
        ).slice(0, 1024),
      });
  }
  const rest = carried.filter((p) => !outcome.has(p.ip));
  return [...outcome.values(), ...rest].slice(0, MAX_TARGET_PEERS);
}
