/**
 * The manager emulator's API (test/support/manager-emulator.ts re-exports all of it): its options, the handle
 * tests drive it with, and the records it keeps (jobs, node peers, holders, counters, recorded requests).
 */
import type { PeerProxy } from './peer-proxy.ts';

export type EmulatedJobState = 'PENDING' | 'RECEIVED' | 'STARTED' | 'RETRY' | 'SUCCESS' | 'FAILURE';

export interface PersonalAccessToken {
  token: string;
  /** `job`, `cluster`, ...; empty or absent grants all. */
  scopes?: string[];
  /** ms since epoch. */
  expiresAt?: number;
  /** false: 403 `Token is inactive`. Default true. */
  active?: boolean;
}

export interface ManagerEmulatorOptions {
  host?: string;
  /** 0 (default) = a free port. */
  port?: number;
  /** Seed peers the preheat jobs download through. single_seed_peer uses the first; the other scopes all. */
  peers?: PeerProxy[];
  /** Shorthand for `peers: [peer]`. */
  peer?: PeerProxy;
  /**
   * Node peers the scheduler knows (hosts of type normal): what a preheat of scope all_peers selects by `ips`,
   * `count` or `percentage` (manager v2.2.0+), and what get_task lists. Each downloads through its `proxy` when
   * given. Without any, all_peers preheats the seed peers as the other scopes do.
   */
  nodePeers?: EmulatedNodePeer[];
  /** Field the job status is serialised as: `state` (the code, default) or `status` (as v2.0.2's documentation has it). */
  statusField?: 'state' | 'status';
  /** Key of the filter in job JSON args: `current` -> filtered_query_params (default), `legacy` -> filter. */
  argsDialect?: 'current' | 'legacy';
  /** `result` keys: snake (v2.1.57+, default) or pascal (before). */
  resultCase?: 'snake' | 'pascal';
  /** Auth of /api/v1: none (<= v2.4.0, default) or jwt (v2.4.1+). */
  apiAuth?: 'none' | 'jwt';
  /** Users for `POST /api/v1/users/signin`. Default `[{ name: 'root', password: 'dragonfly' }]`. */
  users?: { name: string; password: string; id?: number }[];
  /** Lifetime of a JWT, ms. Default 1 h. */
  jwtTTLms?: number;
  /** Personal access tokens accepted on /oapi/v1 (none: every /oapi/v1 request is 401). */
  tokens?: (string | PersonalAccessToken)[];
  /** Scheduler clusters. Default `[{ id: 1, name: 'cluster-1' }]`; empty: creates fail with 500. */
  schedulerClusters?: { id: number; name: string }[];
  /** Time from create to the terminal state, ms. Default 0. */
  jobLatencyMs?: number;
  /** Walk PENDING -> RECEIVED -> STARTED before the end (each visible for jobLatencyMs / 3). */
  runningStates?: boolean;
  /** Clock of token expiry, timestamps and the v2.5.1 rate limiter; default Date.now. */
  now?: () => number;
  /**
   * What job latency is measured on: `real` time (default), or the injected `now`: a job then waits until the test
   * moves that clock and calls `tick()`, so a replay of the real manager's 30 s polling is deterministic and quick.
   */
  jobClock?: 'real' | 'now';
  /**
   * Answer as this real manager release does, as recorded in test/fixtures/dragonfly/manager-<version>.json and
   * replayed by test/unit/manager-replay.test.ts: JWT on /api/v1; sign-in failures 401 `Unauthorized` with a
   * `WWW-Authenticate: JWT realm=Dragonfly` challenge; the create rate limiter runs before validation (a body it
   * cannot bind is answered twice, an unknown scheduler cluster is 429 text/plain) and allows 10 creates per
   * second per named scheduler cluster; a preheat whose seed peer cannot fetch the URL ends SUCCESS with null
   * peer lists. Its JSON is the real one (test/support/manager-json.ts: `is_del`, `user`, sorted `args` with
   * `hdfs`/`object_storage`, nanosecond times in `result`, null for relations not loaded); the legacy `filter`
   * argument is ignored; `per_page=0` lists 10. Default: the contract's behaviour, version-neutral.
   */
  version?: 'v2.5.1';
  /** Creates per second per named scheduler cluster (version v2.5.1; default 10, the manager's default). */
  jobRateLimit?: number;
}

export interface EmulatedNodePeer {
  ip: string;
  hostname: string;
  proxy?: PeerProxy;
}

/** A peer that holds a task, as get_task reports it. */
export interface EmulatedHolder {
  ip: string;
  hostname: string;
  /** `normal` (node peer) or `super` (seed peer). */
  hostType: string;
}

export interface EmulatedJob {
  id: number;
  created_at: string;
  updated_at: string;
  task_id: string;
  bio: string;
  type: string;
  state: EmulatedJobState;
  args: Record<string, unknown>;
  result: Record<string, unknown> | null;
  user_id: number;
  scheduler_clusters: { id: number; name: string }[];
  seed_peer_clusters: unknown[];
  /** Not serialised: what the job did. */
  internal: {
    /** URLs downloaded (blob URLs for an image). */
    urls: string[];
    /** Task id per URL, as the peers computed it. */
    taskIDs: Record<string, string>;
    error?: string;
    done: Promise<void>;
    /** `task_<uuid>` of the job's machinery task (version v2.5.1 `result`). */
    taskUUID: string;
    /** When the manager created the job's task group (Go nanosecond time). */
    groupCreatedAt: string;
  };
}

export interface ManagerEmulatorCounters {
  /** Every HTTP request received. */
  requests: number;
  creates: number;
  gets: number;
  lists: number;
  patches: number;
  deletes: number;
  signIns: number;
  /** `POST /api/v1/jobs`, `GET /oapi/v1/jobs/:id`, ... */
  byRoute: Record<string, number>;
  /** Most requests in progress at once. */
  maxInFlight: number;
}

export interface RecordedManagerRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  body: string;
  status: number;
}

export interface ManagerEmulator {
  url: string;
  port: number;
  jobs: Map<number, EmulatedJob>;
  counters: ManagerEmulatorCounters;
  /** The last 10,000 requests, bodies included (a test tool: credentials are NOT redacted here). */
  log: RecordedManagerRequest[];
  /** Resolves when job `id` is SUCCESS or FAILURE. */
  waitForJob(id: number): Promise<EmulatedJob>;
  /** The next `count` preheat jobs end in FAILURE with `message`. */
  injectJobFailures(count: number, message?: string): void;
  /** The next `count` preheat jobs end SUCCESS but list a failed peer in failure_tasks (single_seed_peer). */
  injectPartialFailures(count: number): void;
  /** Time from create to terminal for jobs created from now on. */
  setJobLatency(ms: number): void;
  /** `jobClock: 'now'`: wakes the jobs whose latency has passed on the injected clock (call after moving it). */
  tick(): void;
  /** The next `count` requests (sign-in excluded) answer `status` with `{"message"}`. */
  injectServerErrors(count: number, status?: number, message?: string): void;
  /** The next `count` creates answer 429 text/plain `rate limit exceeded` (with Retry-After when given). */
  injectRateLimit(count: number, retryAfterSeconds?: number): void;
  /** Every request waits this long before being handled. */
  setRequestDelay(ms: number): void;
  /** Adds (or replaces) a personal access token. */
  addToken(token: string | PersonalAccessToken): void;
  /** Forgets every JWT issued (the next request with one is 401). */
  revokeJWTs(): void;
  /** Downtime: closes the listener and every connection; state is kept. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
  /** Clears jobs, counters and injections. */
  reset(): void;
  /** The peers holding a task (preheats add them, delete_task removes them), as get_task would list them. */
  holders(taskID: string): EmulatedHolder[];
  close(): Promise<void>;
}
