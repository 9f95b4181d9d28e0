/**
 * The JSON the real P2P manager (v2.5.1) writes for its records, for the manager emulator's `version: 'v2.5.1'`
 * profile. Every field is there because test/fixtures/dragonfly/manager-v2.5.1.json shows it, and
 * test/unit/manager-replay.test.ts fails when one goes missing or changes kind (null vs [] included).
 *
 * Where the forms come from (manager v2.5.1 source): records are gorm models with `BaseModel` (`id`, `created_at`,
 * `updated_at`, `is_del`) read back from MySQL with millisecond precision; a job's `result` is the machinery group
 * state converted to a map, so its keys are sorted and its times keep Go's nanoseconds; relations that were not
 * preloaded are `null`, preloaded ones without rows `[]`.
 */

/** Go's RFC 3339 with nanoseconds (`time.RFC3339Nano`): the fraction keeps no trailing zeros. */
function goTime(isoMs: string, subMs: number): string {
  const [whole, frac] = isoMs.slice(0, -1).split('.') as [string, string];
  const digits = (frac + String(subMs).padStart(6, '0')).replace(/0+$/, '');
  return digits === '' ? `${whole}Z` : `${whole}.${digits}Z`;
}

/** A time read back from the database (millisecond precision), as Go writes it. */
export const dbTime = (ms: number): string => goTime(new Date(ms).toISOString(), 0);

/**
 * A time taken by Go's clock (nanoseconds, as in a job's `result`). The sub-millisecond digits are not on the
 * injected clock, so they come from the process's high-resolution timer (1 ns when it reads 0: Go would have
 * printed fewer digits, which no client can tell from a database time).
 */
export const goNanoTime = (ms: number): string =>
  goTime(new Date(ms).toISOString(), Number(process.hrtime.bigint() % 1_000_000n) || 1);

/** `expire` of a sign-in: `time.RFC3339`, whole seconds. */
export const rfc3339Seconds = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

/** The zero `time.Time`. */
export const ZERO_TIME = '0001-01-01T00:00:00Z';

export interface EmulatedUser {
  id: number;
  name: string;
}

/**
 * A job's `user`: the record of `user_id`, loaded only when the job is read back (`AfterFind`); a new job and a job
 * of user 0 carry the zero user.
 */
export function userJSON(user: EmulatedUser | undefined, createdAt: number): Record<string, unknown> {
  return {
    id: user?.id ?? 0,
    created_at: user ? dbTime(createdAt) : ZERO_TIME,
    updated_at: user ? dbTime(createdAt) : ZERO_TIME,
    is_del: 0,
    email: '',
    name: user?.name ?? '',
    avatar: '',
    phone: '',
    state: user ? 'enable' : '',
    location: '',
    bio: '',
    configs: null,
  };
}

export interface EmulatedCluster {
  id: number;
  name: string;
}

export interface ClusterDefaults {
  /** When the emulator started: the clusters' creation time. */
  createdAt: number;
  /** Creates per second of the scheduler cluster's limiter (`config.job_rate_limit`). */
  jobRateLimit: number;
}

/** The seed peer cluster paired with a scheduler cluster (the manager creates one of each, same id and name). */
function seedPeerClusterJSON(c: EmulatedCluster, d: ClusterDefaults): Record<string, unknown> {
  return {
    id: c.id,
    created_at: dbTime(d.createdAt),
    updated_at: dbTime(d.createdAt),
    is_del: 0,
    name: c.name,
    bio: '',
    config: { load_limit: 2000 },
    scheduler_clusters: null,
    seed_peer: null,
    jobs: null,
  };
}

/**
 * A scheduler cluster record. `withSeedPeerClusters`: preloaded (`GET /api/v1/scheduler-clusters/:id`); inside a
 * job the cluster's own relations are never loaded.
 */
export function schedulerClusterJSON(
  c: EmulatedCluster,
  d: ClusterDefaults,
  withSeedPeerClusters = false,
): Record<string, unknown> {
  return {
    id: c.id,
    created_at: dbTime(d.createdAt),
    updated_at: dbTime(d.createdAt),
    is_del: 0,
    name: c.name,
    bio: '',
    config: { candidate_parent_limit: 3, filter_parent_limit: 15, job_rate_limit: d.jobRateLimit },
    client_config: { load_limit: 200 },
    seed_client_config: {},
    scopes: {},
    is_default: c.id === 1,
    seed_peer_clusters: withSeedPeerClusters ? [seedPeerClusterJSON(c, d)] : null,
    schedulers: null,
    peers: null,
    jobs: null,
  };
}

const BLOCK_LIST = { task: null, persistent_task: null, persistent_cache_task: null };

/** `GET /oapi/v1/clusters/:id`: a view joining the scheduler cluster and its seed peer cluster. */
export function clusterViewJSON(c: EmulatedCluster, d: ClusterDefaults): Record<string, unknown> {
  return {
    id: c.id,
    name: c.name,
    bio: '',
    scopes: { idc: '', location: '', cidrs: null, hostnames: null },
    scheduler_cluster_id: c.id,
    seed_peer_cluster_id: c.id,
    scheduler_cluster_config: {
      candidate_parent_limit: 3,
      filter_parent_limit: 15,
      job_rate_limit: d.jobRateLimit,
    },
    seed_peer_cluster_config: { load_limit: 2000, block_list: BLOCK_LIST },
    peer_cluster_config: { load_limit: 200, block_list: BLOCK_LIST },
    created_at: dbTime(d.createdAt),
    updated_at: dbTime(d.createdAt),
    is_default: c.id === 1,
  };
}

/** A JSON object with its keys sorted, as Go writes a map (a job's `args` and `result` are maps). */
export function sortedKeys(value: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, value[k]]),
  );
}

/** A result with PascalCase keys (the emulator's `resultCase: 'pascal'`: managers before v2.1.57). */
export function toPascal(value: unknown): unknown {
  const special: Record<string, string> = {
    group_uuid: 'GroupUUID',
    task_uuid: 'TaskUUID',
    ttl: 'TTL',
    url: 'URL',
    ip: 'IP',
    scheduler_cluster_id: 'SchedulerClusterID',
  };
  if (Array.isArray(value)) return value.map(toPascal);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = special[k] ?? k.replace(/(^|_)([a-z])/g, (_m, _p, c: string) => c.toUpperCase());
      out[key] = toPascal(v);
    }
    return out;
  }
  return value;
}
