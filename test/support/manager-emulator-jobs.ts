/**
 * How the manager emulator runs a job once created: PENDING -> (RECEIVED, STARTED) -> SUCCESS/FAILURE, with its
 * latency and injected failures. A preheat REALLY downloads through the peer proxies (an image: its manifest resolved
 * from the registry, then every blob), or through the node peers a targeted preheat names; get_task / delete_task
 * read and change the holders preheats recorded. The result is the contract's, or the real manager's (v2.5.1) map.
 */
import { randomUUID } from 'node:crypto';
import { request as undiciRequest, type Agent } from 'undici';
import { RAW_DEFAULT_FILTERED_QUERY_PARAMS, taskID as computeTaskID } from '../../src/storage/taskid.ts';
import { IMAGE_URL } from './manager-emulator-args.ts';
import { mapLimit } from './manager-emulator-http.ts';
import type {
  EmulatedHolder,
  EmulatedJob,
  EmulatedJobState,
  EmulatedNodePeer,
} from './manager-emulator-types.ts';
import { goNanoTime, sortedKeys } from './manager-json.ts';
import type { PeerProxy } from './peer-proxy.ts';

/** A peer's outcome in a job's result. */
type PeerTask = { url: string; hostname: string; ip: string; description?: string };

/** The real manager's `result` map of a job in `state` (see realResult below). */
export type RealResult = (
  job: EmulatedJob,
  state: EmulatedJobState,
  error: string,
  lists: { success: PeerTask[]; failure: PeerTask[] } | null,
  emptyLists?: null | [],
) => Record<string, unknown>;

/** Ends a node-peer preheat's branch of runJob: its outcome is already in the lists and the error. */
class NodePreheatDone extends Error {}

/** What running jobs shares with the rest of the emulator. */
export interface JobRunnerContext {
  /** The real manager's (v2.5.1) profile, else the contract's. */
  real: boolean;
  peers: PeerProxy[];
  nodePeers: EmulatedNodePeer[];
  /** Per task id: the peers that hold it, by IP. */
  holders: Map<string, Map<string, EmulatedHolder>>;
  hold(taskID: string, h: EmulatedHolder): void;
  now(): number;
  /** A record's time, in the profile's form. */
  stamp(): string;
  runningStates: boolean;
  agent: Agent;
  /** The jobs that exist: one deleted meanwhile stops running. */
  jobs: Map<number, EmulatedJob>;
  /** The job latency now (setJobLatency changes it). */
  latency(): number;
  inject: { jobFailures: string[]; partial: number };
  waitJobClock(ms: number): Promise<void>;
  taskOf(args: Record<string, unknown>): string;
}

export interface JobRunner {
  runJob(job: EmulatedJob): Promise<void>;
  /** The real manager's `result` map of a job in `state`. */
  realResult: RealResult;
}

export function jobRunner(ctx: JobRunnerContext): JobRunner {
  const { real, peers, nodePeers, holders, hold, now, stamp, runningStates, agent, jobs, inject } = ctx;
  const { waitJobClock, taskOf } = ctx;

  function setState(job: EmulatedJob, state: EmulatedJobState) {
    job.state = state;
    job.updated_at = stamp();
  }

  /**
   * The real manager's `result` (v2.5.1): the machinery group state as a map (keys sorted, Go nanosecond times),
   * one task per scheduler cluster. `lists` null: the task has no results (still PENDING, or failed before any
   * peer answered); an empty peer list is null, never [].
   */
  function realResult(
    job: EmulatedJob,
    state: EmulatedJobState,
    error: string,
    lists: { success: PeerTask[]; failure: PeerTask[] } | null,
    /** all_peers makes its lists with make(): empty ones are [], not null. */
    emptyLists: null | [] = null,
  ): Record<string, unknown> {
    const orNull = (tasks: PeerTask[]) => (tasks.length > 0 ? tasks.map((t) => sortedKeys(t)) : emptyLists);
    return sortedKeys({
      created_at: job.internal.groupCreatedAt,
      group_uuid: job.task_id,
      job_states: job.scheduler_clusters.map((c) =>
        sortedKeys({
          created_at: job.internal.groupCreatedAt,
          error,
          results: lists
            ? [
                sortedKeys({
                  failure_tasks: orNull(lists.failure),
                  scheduler_cluster_id: c.id,
                  success_tasks: orNull(lists.success),
                }),
              ]
            : null,
          state,
          task_name: job.type,
          task_uuid: job.internal.taskUUID,
          ttl: 0,
        }),
      ),
      state,
      updated_at: goNanoTime(now()),
    });
  }

  async function resolveImage(args: Record<string, unknown>): Promise<string[]> {
    const url = args['url'] as string;
    const m = IMAGE_URL.exec(url)!;
    const [, scheme, registry, repo] = m as unknown as [string, string, string, string];
    const headers: Record<string, string> = {
      accept: [
        'application/vnd.oci.image.index.v1+json',
        'application/vnd.docker.distribution.manifest.list.v2+json',
        'application/vnd.oci.image.manifest.v1+json',
        'application/vnd.docker.distribution.manifest.v2+json',
      ].join(', '),
      ...((args['headers'] as Record<string, string> | null) ?? {}),
    };
    if (args['username']) {
      headers['authorization'] =
        'Basic ' +
        Buffer.from(`${String(args['username'])}:${String(args['password'] ?? '')}`).toString('base64');
    }
    const get = async (u: string): Promise<{ mediaType: string; doc: Record<string, unknown> }> => {
      const res = await undiciRequest(u, { headers, dispatcher: agent });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`fetch manifest ${u}: HTTP ${res.statusCode}`);
      const doc = JSON.parse(text) as Record<string, unknown>;
      const ct = String(res.headers['content-type'] ?? '');
      return { mediaType: (doc['mediaType'] as string | undefined) ?? ct, doc };
    };
    const top = await get(url);
    const mediaType = top.mediaType;
    let doc = top.doc;
    if (mediaType.includes('index') || mediaType.includes('manifest.list')) {
      const platform = (args['platform'] as string) || 'linux/amd64';
      const [os, arch, variant] = platform.split('/');
      const list =
        (doc['manifests'] as {
          digest: string;
          platform?: { os?: string; architecture?: string; variant?: string };
        }[]) ?? [];
      const pick = list.find(
        (x) =>
          x.platform?.os === os &&
          x.platform?.architecture === arch &&
          (variant === undefined || x.platform?.variant === variant),
      );
      if (!pick) throw new Error(`no manifest for platform ${platform}`);
      doc = (await get(`${scheme}://${registry}/v2/${repo}/manifests/${pick.digest}`)).doc;
    }
    const config = doc['config'] as { digest?: string } | undefined;
    const layers = (doc['layers'] as { digest: string }[] | undefined) ?? [];
    const digests = [...(config?.digest ? [config.digest] : []), ...layers.map((l) => l.digest)];
    return digests.map((d) => `${scheme}://${registry}/v2/${repo}/blobs/${d}`);
  }

  async function runJob(job: EmulatedJob): Promise<void> {
    const latency = ctx.latency();
    const forcedFailure = job.type === 'preheat' ? inject.jobFailures.shift() : undefined;
    let partial = false;
    if (job.type === 'preheat' && forcedFailure === undefined && inject.partial > 0) {
      inject.partial--;
      partial = true;
    }
    if (runningStates) {
      await waitJobClock(latency / 3);
      setState(job, 'RECEIVED');
      await waitJobClock(latency / 3);
      setState(job, 'STARTED');
      await waitJobClock(latency / 3);
    } else {
      await waitJobClock(latency);
    }
    if (!jobs.has(job.id)) return; // deleted meanwhile

    const args = job.args;
    const success: { url: string; hostname: string; ip: string }[] = [];
    const failure: { url: string; hostname: string; ip: string; description: string }[] = [];
    let error = '';
    if (forcedFailure !== undefined) {
      error = forcedFailure;
    } else if (job.type === 'preheat') {
      try {
        const urls =
          args['type'] === 'image'
            ? await resolveImage(args)
            : [...(args['url'] ? [args['url'] as string] : []), ...((args['urls'] as string[] | null) ?? [])];
        job.internal.urls = urls;
        const filterRaw = (args['filtered_query_params'] ?? args['filter'] ?? '') as string;
        const filter = (filterRaw || RAW_DEFAULT_FILTERED_QUERY_PARAMS).split('&').filter((s) => s !== '');
        const headers: Record<string, string> = {
          ...((args['headers'] as Record<string, string> | null) ?? {}),
        };
        if (args['type'] === 'image' && args['username']) {
          headers['authorization'] =
            'Basic ' +
            Buffer.from(`${String(args['username'])}:${String(args['password'] ?? '')}`).toString('base64');
        }
        const ident = {
          filter,
          tag: (args['tag'] as string) || undefined,
          application: (args['application'] as string) || undefined,
          pieceLength: (args['piece_length'] as number | null) ?? undefined,
        };
        for (const u of urls) job.internal.taskIDs[u] = computeTaskID({ url: u, ...ident });
        if (args['scope'] === 'all_peers' && nodePeers.length > 0) {
          const outcome = await preheatNodePeers(job, urls, ident, headers, success, failure);
          error = outcome;
          throw new NodePreheatDone();
        }
        const targets = args['scope'] === 'single_seed_peer' ? peers.slice(0, 1) : peers;
        const timeoutMs = Number(args['timeout']) / 1e6;
        const work = mapLimit(urls, Number(args['concurrent_task_count']) || 8, async (u) => {
          if (targets.length === 0) {
            success.push({ url: u, hostname: 'seed-peer-0', ip: '127.0.0.1' });
            return;
          }
          await Promise.all(
            targets.map(async (peer, i) => {
              const hostname = `seed-peer-${i}`;
              try {
                await peer.preheat(u, { ...ident, headers });
                success.push({ url: u, hostname, ip: '127.0.0.1' });
                hold(job.internal.taskIDs[u]!, { ip: '127.0.0.1', hostname, hostType: 'super' });
              } catch (e) {
                failure.push({
                  url: u,
                  hostname,
                  ip: '127.0.0.1',
                  description: e instanceof Error ? e.message : String(e),
                });
              }
            }),
          );
        });
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), timeoutMs)));
        const outcome = await Promise.race([work, timedOut]);
        clearTimeout(timer);
        if (outcome === 'timeout') error = 'preheat timeout';
        else if (failure.length > 0) error = failure[0]!.description;
      } catch (e) {
        if (!(e instanceof NodePreheatDone)) error = e instanceof Error ? e.message : String(e);
      }
    } else if (job.type === 'get_task' || job.type === 'delete_task') {
      return finishTaskJob(job);
    }
    if (!jobs.has(job.id)) return;
    if (partial && !error) {
      failure.push({
        url: String(args['url'] ?? ''),
        hostname: 'seed-peer-x',
        ip: '127.0.0.2',
        description: 'injected partial failure',
      });
    }
    // The real manager (v2.5.1), scope single_seed_peer: a seed peer that cannot fetch the URL (an origin 404 or
    // 403) does not fail the job. It ends SUCCESS with both peer lists null; only the scheduler's log says why.
    const silentFailure =
      forcedFailure === undefined &&
      !(args['scope'] === 'all_peers' && nodePeers.length > 0) &&
      !partial &&
      (args['scope'] ?? 'single_seed_peer') === 'single_seed_peer' &&
      success.length === 0 &&
      failure.length > 0 &&
      error !== 'preheat timeout';
    if (silentFailure) error = '';
    const failed = error !== '';
    const state: EmulatedJobState = failed ? 'FAILURE' : 'SUCCESS';
    job.internal.error = error || undefined;
    if (real) {
      const lists = failed && success.length === 0 && failure.length === 0 ? null : { success, failure };
      job.result =
        job.type === 'preheat'
          ? realResult(
              job,
              state,
              error,
              silentFailure ? { success: [], failure: [] } : lists,
              args['scope'] === 'all_peers' && nodePeers.length > 0 ? [] : null,
            )
          : null;
      setState(job, state);
      return;
    }
    const now = new Date().toISOString();
    job.result =
      job.type === 'preheat'
        ? {
            group_uuid: job.task_id,
            state,
            created_at: job.created_at,
            updated_at: now,
            job_states: job.scheduler_clusters.map((c) => ({
              task_uuid: `task_${randomUUID()}`,
              task_name: 'preheat',
              state,
              error,
              ttl: 0,
              results: silentFailure
                ? [{ success_tasks: null, failure_tasks: null, scheduler_cluster_id: c.id }]
                : failed && success.length === 0 && failure.length === 0
                  ? []
                  : [{ success_tasks: success, failure_tasks: failure, scheduler_cluster_id: c.id }],
            })),
          }
        : null;
    setState(job, state);
  }

  /**
   * scope all_peers on node peers (manager v2.5.1 scheduler/job PreheatAllPeers): the peers are chosen by `ips`
   * (none known: the job fails `no peer found for ips [...]`), else `count`, else `percentage`, else all; each
   * downloads every URL; the job succeeds when any peer did (its failures listed beside), and fails `all peers
   * preheat failed: ...` when none did. Returns the job's error ('' on success).
   */
  async function preheatNodePeers(
    job: EmulatedJob,
    urls: string[],
    ident: Parameters<PeerProxy['preheat']>[1],
    headers: Record<string, string>,
    success: PeerTask[],
    failure: PeerTask[],
  ): Promise<string> {
    const args = job.args;
    const ips = (args['ips'] as string[] | null) ?? [];
    const count = args['count'] as number | null;
    const percentage = args['percentage'] as number | null;
    let selected = nodePeers;
    if (ips.length > 0) {
      selected = nodePeers.filter((p) => ips.includes(p.ip));
      if (selected.length === 0) return `no peer found for ips [${ips.join(' ')}]`;
    } else if (count) {
      selected = nodePeers.slice(0, Math.min(count, nodePeers.length));
    } else if (percentage) {
      selected = nodePeers.slice(0, Math.max(1, Math.floor((nodePeers.length * percentage) / 100)));
    }
    for (const u of urls) {
      const id = job.internal.taskIDs[u]!;
      await Promise.all(
        selected.map(async (peer) => {
          try {
            await peer.proxy?.preheat(u, { ...ident, headers });
            success.push({ url: u, hostname: peer.hostname, ip: peer.ip });
            hold(id, { ip: peer.ip, hostname: peer.hostname, hostType: 'normal' });
          } catch (e) {
            failure.push({
              url: u,
              hostname: peer.hostname,
              ip: peer.ip,
              description: `task ${id} failed: ${e instanceof Error ? e.message : String(e)}`,
            });
          }
        }),
      );
      // The scheduler has the seed peer fetch what a node peer asks it for first.
      if (success.some((t) => t.url === u))
        hold(id, { ip: '127.0.0.1', hostname: 'seed-peer-0', hostType: 'super' });
    }
    if (success.length > 0) return '';
    const first = failure[0];
    return `all peers preheat failed: ${job.task_id} ${job.internal.taskUUID} ${first ? `${first.ip} ${first.hostname} ${first.description}` : 'no error message'}`;
  }

  /** A get_task or delete_task job, on the holders the preheats recorded (manager v2.5.1 answers, 2026-11-24). */
  function finishTaskJob(job: EmulatedJob): void {
    if (!jobs.has(job.id)) return;
    const taskID = taskOf(job.args);
    job.internal.taskIDs[taskID] = taskID;
    const known = holders.has(taskID);
    const held = [...(holders.get(taskID)?.values() ?? [])];
    const at = goNanoTime(now());
    const results = (clusterID: number) =>
      job.type === 'get_task'
        ? sortedKeys({
            peers: held.map((h) =>
              sortedKeys({
                IsFinished: true,
                created_at: at,
                host_type: h.hostType,
                hostname: h.hostname,
                id: `${h.ip}-${h.hostname}${h.hostType === 'normal' ? '' : '-seed'}`,
                ip: h.ip,
                updated_at: at,
              }),
            ),
            scheduler_cluster_id: clusterID,
          })
        : // A task the scheduler knows answers lists made with make() ([] when empty); an unknown one, none (null).
          sortedKeys({
            failure_tasks: known ? [] : null,
            scheduler_cluster_id: clusterID,
            success_tasks: known
              ? held.map((h) => sortedKeys({ host_type: h.hostType, hostname: h.hostname, ip: h.ip }))
              : null,
          });
    if (job.type === 'delete_task') holders.delete(taskID);
    job.result = sortedKeys({
      created_at: job.internal.groupCreatedAt,
      group_uuid: job.task_id,
      job_states: job.scheduler_clusters.map((c) =>
        sortedKeys({
          created_at: job.internal.groupCreatedAt,
          error: '',
          results: [results(c.id)],
          state: 'SUCCESS',
          task_name: job.type,
          task_uuid: job.internal.taskUUID,
          ttl: 0,
        }),
      ),
      state: 'SUCCESS',
      updated_at: at,
    });
    setState(job, 'SUCCESS');
  }

  return { runJob, realResult };
}
