/**
 * What a finished manager preheat job says, in the words of a ModelPreheat's status: the peers that succeeded and
 * failed (bounded, with full counts) and the manager's own reasons for a failure.
 */
import { MAX_LISTED_TASKS, type ModelPreheatStatus } from '../../api/index.ts';
import { jobPeerTasks, type ManagerJob, type PeerTask } from '../../manager/types.ts';

export type PeerResults = Required<
  Pick<ModelPreheatStatus, 'successCount' | 'failureCount' | 'successTasks' | 'failureTasks'>
>;

/** Peers that succeeded and failed, bounded for status, with full counts. */
export function peerResults(job: ManagerJob): PeerResults {
  const { success, failure } = jobPeerTasks(job);
  const clean = (t: PeerTask) => ({
    url: t.url,
    ...(t.hostname ? { hostname: t.hostname } : {}),
    ...(t.ip ? { ip: t.ip } : {}),
    ...(t.description ? { description: t.description } : {}),
  });
  return {
    successCount: success.length,
    failureCount: failure.length,
    successTasks: success.slice(0, MAX_LISTED_TASKS).map(clean),
    failureTasks: failure.slice(0, MAX_LISTED_TASKS).map(clean),
  };
}

/** The manager's own words for why a job failed. */
export function failureText(job: ManagerJob): string {
  const { failure, errors } = jobPeerTasks(job);
  const peers = failure.map((t) => t.description).filter((d): d is string => !!d);
  const text = [...new Set([...errors, ...peers])].join('; ');
  return `job ${job.id} ended in FAILURE${text ? `: ${text}` : ''}`;
}
