/**
 * Wire shapes of the manager job API (as the real manager, v2.5.1 and older, sends them) as zod schemas, and their
 * normalised TypeScript form. The parsers are tolerant where the manager changed over versions:
 * - the job status is `state` (what the code always sent) with a fall-back to `status` (as v2.0.2's documentation has it);
 * - `result` is snake_case from v2.1.57 and PascalCase before: keys are normalised to snake_case first;
 * - the filter in `args` is `filter` (<= v2.1.30), `filteredQueryParams` (v2.1.31..54) or `filtered_query_params`.
 */
import { z } from 'zod';

export const JOB_STATES = ['PENDING', 'RECEIVED', 'STARTED', 'RETRY', 'SUCCESS', 'FAILURE'] as const;
export type JobState = (typeof JOB_STATES)[number];
const TERMINAL_JOB_STATES: readonly JobState[] = ['SUCCESS', 'FAILURE'];
export const isTerminalState = (s: JobState): boolean => TERMINAL_JOB_STATES.includes(s);

export const PREHEAT_SCOPES = ['single_seed_peer', 'all_seed_peers', 'all_peers'] as const;
export type PreheatScope = (typeof PREHEAT_SCOPES)[number];

const NS_PER_MS = 1_000_000;

/** `GroupUUID` -> `group_uuid`, `SchedulerClusterID` -> `scheduler_cluster_id`, `jobStates` -> `job_states`. */
export function toSnakeCase(key: string): string {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .toLowerCase();
}

function snakeKeysDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snakeKeysDeep);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = toSnakeCase(k);
      // Never let a PascalCase duplicate overwrite the snake_case original.
      if (!(key in out) || k === key) out[key] = snakeKeysDeep(v);
    }
    return out;
  }
  return value;
}

/** Shallow snake_case of an object's own keys (args keep their header names untouched). */
function snakeKeysShallow(value: unknown): unknown {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    const key = toSnakeCase(k);
    if (!(key in out) || k === key) out[key] = v;
  }
  return out;
}

const optionalString = z
  .string()
  .nullish()
  .transform((v) => v ?? undefined);

export const PeerTaskSchema = z
  .object({
    url: z.string().nullish(),
    hostname: z.string().nullish(),
    ip: z.string().nullish(),
    description: z.string().nullish(),
  })
  .loose();
export interface PeerTask {
  url: string;
  hostname?: string;
  ip?: string;
  description?: string;
}

const peerTaskList = z
  .array(z.unknown())
  .nullish()
  .transform((items): PeerTask[] =>
    (items ?? []).flatMap((item) => {
      const p = PeerTaskSchema.safeParse(item);
      if (!p.success) return [];
      const t: PeerTask = { url: p.data.url ?? '' };
      if (p.data.hostname) t.hostname = p.data.hostname;
      if (p.data.ip) t.ip = p.data.ip;
      if (p.data.description) t.description = p.data.description;
      return [t];
    }),
  );

/** A peer of a get_task job's result (manager v2.1.x+; `IsFinished` as the Go struct names it, snake-cased). */
export interface TaskPeer {
  id?: string | undefined;
  hostname?: string | undefined;
  ip: string;
  /** `normal` for a node peer; `super`, `strong` or `weak` for seed peers. */
  hostType?: string | undefined;
  finished: boolean;
}

const taskPeerList = z
  .array(z.unknown())
  .nullish()
  .transform((items): TaskPeer[] =>
    (items ?? []).flatMap((item) => {
      const p = z
        .object({
          id: z.string().nullish(),
          hostname: z.string().nullish(),
          ip: z.string(),
          host_type: z.string().nullish(),
          is_finished: z.boolean().nullish(),
        })
        .loose()
        .safeParse(item);
      if (!p.success) return [];
      return [
        {
          id: p.data.id ?? undefined,
          hostname: p.data.hostname ?? undefined,
          ip: p.data.ip,
          hostType: p.data.host_type ?? undefined,
          finished: p.data.is_finished === true,
        },
      ];
    }),
  );

export const PreheatResultSchema = z
  .object({
    success_tasks: peerTaskList,
    failure_tasks: peerTaskList,
    peers: taskPeerList,
    scheduler_cluster_id: z.number().nullish(),
  })
  .loose();

export const JobStateEntrySchema = z
  .object({
    task_uuid: optionalString,
    task_name: optionalString,
    state: optionalString,
    error: optionalString,
    ttl: z.number().nullish(),
    results: z
      .array(z.unknown())
      .nullish()
      .transform((items) =>
        (items ?? []).flatMap((item) => {
          const p = PreheatResultSchema.safeParse(item);
          return p.success ? [p.data] : [];
        }),
      ),
  })
  .loose();

export const JobResultSchema = z.preprocess(
  snakeKeysDeep,
  z
    .object({
      group_uuid: optionalString,
      state: optionalString,
      created_at: optionalString,
      updated_at: optionalString,
      job_states: z.array(JobStateEntrySchema).nullish(),
    })
    .loose(),
);

export interface JobResult {
  groupUUID?: string | undefined;
  state?: string | undefined;
  createdAt?: string | undefined;
  updatedAt?: string | undefined;
  jobStates: {
    taskUUID?: string | undefined;
    taskName?: string | undefined;
    state?: string | undefined;
    error?: string | undefined;
    ttl?: number | undefined;
    results: {
      successTasks: PeerTask[];
      failureTasks: PeerTask[];
      /** get_task only: the peers that have the task. */
      peers: TaskPeer[];
      schedulerClusterID?: number | undefined;
    }[];
  }[];
}

const stateSchema = z.preprocess((v) => (typeof v === 'string' ? v.toUpperCase() : v), z.enum(JOB_STATES));

/** A filter as found in job args: `&`-joined string (all versions), tolerating an array. */
const filterValue = z
  .union([z.string(), z.array(z.string())])
  .nullish()
  .transform((v) => {
    if (v === null || v === undefined) return undefined;
    const list = Array.isArray(v) ? v : v.split('&');
    return list.map((s) => s.trim()).filter((s) => s.length > 0);
  });

export const JobArgsSchema = z.preprocess(
  snakeKeysShallow,
  z
    .object({
      type: optionalString,
      url: optionalString,
      urls: z.array(z.string()).nullish(),
      filtered_query_params: filterValue,
      filter: filterValue,
      headers: z.record(z.string(), z.string()).nullish(),
      tag: optionalString,
      application: optionalString,
      platform: optionalString,
      scope: optionalString,
      piece_length: z.number().nullish(),
      timeout: z.number().nullish(),
    })
    .loose(),
);

export const JobSchema = z
  .object({
    id: z.number().int(),
    created_at: optionalString,
    updated_at: optionalString,
    task_id: optionalString,
    bio: optionalString,
    type: z.string(),
    state: stateSchema.optional(),
    status: stateSchema.optional(),
    args: JobArgsSchema.nullish(),
    result: JobResultSchema.nullish(),
    user_id: z.number().nullish(),
    scheduler_clusters: z.array(z.object({ id: z.number(), name: z.string().nullish() }).loose()).nullish(),
  })
  .loose()
  .refine((j) => j.state !== undefined || j.status !== undefined, {
    message: 'job has neither state nor status',
  });

export const JobListSchema = z.array(JobSchema);

export const SignInResponseSchema = z
  .object({
    token: z.string().min(1),
    expire: z.union([z.string(), z.number()]).nullish(),
  })
  .loose();

/** A job as the client returns it. */
export interface ManagerJob {
  id: number;
  /** `task_id` of the job: the group id `group_<uuid>`. */
  groupID: string;
  type: string;
  state: JobState;
  bio?: string | undefined;
  createdAt?: string | undefined;
  updatedAt?: string | undefined;
  userID?: number | undefined;
  args: {
    type?: string | undefined;
    url?: string | undefined;
    urls?: string[] | undefined;
    /** Whichever dialect the manager answered with, as a list. */
    filteredQueryParams?: string[] | undefined;
    headers?: Record<string, string> | undefined;
    tag?: string | undefined;
    application?: string | undefined;
    platform?: string | undefined;
    scope?: string | undefined;
    pieceLength?: number | undefined;
    /** Nanoseconds (Go time.Duration). */
    timeoutNs?: number | undefined;
  };
  result?: JobResult | undefined;
  schedulerClusters: { id: number; name?: string | undefined }[];
}

/** Turns the validated wire JSON into a {@link ManagerJob}. */
export function normaliseJob(j: z.output<typeof JobSchema>): ManagerJob {
  const a = j.args ?? undefined;
  const job: ManagerJob = {
    id: j.id,
    groupID: j.task_id ?? '',
    type: j.type,
    // The code always sent `state`; the seed shows `status`.
    state: (j.state ?? j.status)!,
    bio: j.bio,
    createdAt: j.created_at,
    updatedAt: j.updated_at,
    userID: j.user_id ?? undefined,
    args: a
      ? {
          type: a.type,
          url: a.url,
          urls: a.urls ?? undefined,
          filteredQueryParams: a.filtered_query_params ?? a.filter,
          headers: a.headers ?? undefined,
          tag: a.tag,
          application: a.application,
          platform: a.platform,
          scope: a.scope,
          pieceLength: a.piece_length ?? undefined,
          timeoutNs: a.timeout ?? undefined,
        }
      : {},
    schedulerClusters: (j.scheduler_clusters ?? []).map((c) => ({ id: c.id, name: c.name ?? undefined })),
  };
  if (j.result) {
    job.result = {
      groupUUID: j.result.group_uuid,
      state: j.result.state,
      createdAt: j.result.created_at,
      updatedAt: j.result.updated_at,
      jobStates: (j.result.job_states ?? []).map((s) => ({
        taskUUID: s.task_uuid,
        taskName: s.task_name,
        state: s.state,
        error: s.error,
        ttl: s.ttl ?? undefined,
        results: s.results.map((r) => ({
          successTasks: r.success_tasks,
          failureTasks: r.failure_tasks,
          peers: r.peers,
          schedulerClusterID: r.scheduler_cluster_id ?? undefined,
        })),
      })),
    };
  }
  return job;
}

/**
 * All peers that succeeded and failed, over every job state and scheduler cluster. With scope single_seed_peer
 * a SUCCESS job may still list failures: report both. Also the first non-empty task error, if any.
 */
export function jobPeerTasks(job: ManagerJob): {
  success: PeerTask[];
  failure: PeerTask[];
  errors: string[];
} {
  const success: PeerTask[] = [];
  const failure: PeerTask[] = [];
  const errors: string[] = [];
  for (const s of job.result?.jobStates ?? []) {
    if (s.error) errors.push(s.error);
    for (const r of s.results) {
      success.push(...r.successTasks);
      failure.push(...r.failureTasks);
    }
  }
  return { success, failure, errors };
}

/** A get_task or delete_task job (manager v2.1.x+): by the task id the peers use. */
export interface TaskJobRequest {
  taskID: string;
  /** Absent or empty: all scheduler clusters. */
  schedulerClusterIDs?: number[] | undefined;
  bio?: string | undefined;
  /** Job time-out on the manager, in milliseconds (sent in nanoseconds; default 60 minutes there). */
  timeoutMs?: number | undefined;
}

/** The create body of a get_task or delete_task job. */
export function buildCreateTaskJobBody(
  type: 'get_task' | 'delete_task',
  req: TaskJobRequest,
): Record<string, unknown> {
  const args: Record<string, unknown> = { task_id: req.taskID };
  if (req.timeoutMs !== undefined) args['timeout'] = req.timeoutMs * NS_PER_MS;
  const body: Record<string, unknown> = { type, args };
  if (req.bio) body['bio'] = req.bio;
  if (req.schedulerClusterIDs?.length) body['scheduler_cluster_ids'] = req.schedulerClusterIDs;
  return body;
}

/** Which peers hold the task, over every scheduler cluster of a get_task job (a peer listed once, by IP). */
export function jobTaskPeers(job: ManagerJob): TaskPeer[] {
  const byIP = new Map<string, TaskPeer>();
  for (const s of job.result?.jobStates ?? [])
    for (const r of s.results) for (const p of r.peers) if (!byIP.get(p.ip)?.finished) byIP.set(p.ip, p);
  return [...byIP.values()].sort((a, b) => a.ip.localeCompare(b.ip));
}

/** What a caller asks for; {@link buildCreatePreheatBody} turns it into the wire JSON. */
export interface PreheatJobRequest {
  type: 'file' | 'image';
  url?: string | undefined;
  /** file only (manager v2.2.3+). */
  urls?: string[] | undefined;
  /** Query parameter names left out of the task id. Absent: the manager's default. */
  filteredQueryParams?: string[] | undefined;
  headers?: Record<string, string> | undefined;
  tag?: string | undefined;
  application?: string | undefined;
  /** image only: registry credentials (never logged). */
  username?: string | undefined;
  password?: string | undefined;
  platform?: string | undefined;
  scope?: PreheatScope | undefined;
  ips?: string[] | undefined;
  count?: number | undefined;
  percentage?: number | undefined;
  concurrentTaskCount?: number | undefined;
  concurrentPeerCount?: number | undefined;
  pieceLength?: number | undefined;
  /** Job time-out on the manager, in milliseconds (sent in nanoseconds). */
  timeoutMs?: number | undefined;
  /** Absent or empty: all scheduler clusters. */
  schedulerClusterIDs?: number[] | undefined;
  bio?: string | undefined;
  userID?: number | undefined;
}

export type ArgsDialect = 'current' | 'legacy';

/** The create body: `{"type":"preheat","args":{...},"scheduler_cluster_ids":[...]}`. */
export function buildCreatePreheatBody(
  req: PreheatJobRequest,
  dialect: ArgsDialect,
): Record<string, unknown> {
  const args: Record<string, unknown> = { type: req.type };
  const set = (key: string, value: unknown) => {
    if (value !== undefined) args[key] = value;
  };
  set('url', req.url);
  set('urls', req.urls);
  if (req.filteredQueryParams !== undefined && req.filteredQueryParams.length > 0) {
    // Both dialects carry an `&`-joined string; only the key changed (filter <= v2.1.30, filtered_query_params).
    args[dialect === 'legacy' ? 'filter' : 'filtered_query_params'] = req.filteredQueryParams.join('&');
  }
  set('headers', req.headers);
  set('tag', req.tag);
  set('application', req.application);
  set('username', req.username);
  set('password', req.password);
  set('platform', req.platform);
  set('scope', req.scope);
  set('ips', req.ips);
  set('count', req.count);
  set('percentage', req.percentage);
  set('concurrent_task_count', req.concurrentTaskCount);
  set('concurrent_peer_count', req.concurrentPeerCount);
  set('piece_length', req.pieceLength);
  if (req.timeoutMs !== undefined) args['timeout'] = Math.round(req.timeoutMs * NS_PER_MS);
  const body: Record<string, unknown> = { type: 'preheat', args };
  if (req.schedulerClusterIDs !== undefined && req.schedulerClusterIDs.length > 0) {
    body['scheduler_cluster_ids'] = req.schedulerClusterIDs;
  }
  if (req.bio !== undefined) body['bio'] = req.bio;
  if (req.userID !== undefined) body['user_id'] = req.userID;
  return body;
}

export interface ListJobsQuery {
  page?: number | undefined;
  perPage?: number | undefined;
  type?: string | undefined;
  state?: JobState | undefined;
  userID?: number | undefined;
}

export type LinkRel = 'first' | 'prev' | 'next' | 'last';

export interface JobPage {
  jobs: ManagerJob[];
  /** Targets of the `Link` header, as the manager wrote them (often relative: `/api/v1/jobs?page=2&...`). */
  links: Partial<Record<LinkRel, string>>;
  /** The `page` query parameter of each link. */
  pages: Partial<Record<LinkRel, number>>;
}

/**
 * Parses an RFC 8288 `Link` header as the manager writes it (`<url>;rel=next,<url>;rel=last`, rel unquoted) and
 * also the quoted form. Hand-written: a dozen lines, no dependency needed for it.
 */
export function parseLinkHeader(header: string | undefined): Partial<Record<string, string>> {
  const out: Partial<Record<string, string>> = {};
  if (!header) return out;
  for (const m of header.matchAll(/<([^>]*)>\s*((?:;\s*[^;,]+)*)/g)) {
    const target = m[1]!;
    for (const p of (m[2] ?? '').matchAll(/;\s*rel\s*=\s*"?([^";,]+)"?/gi)) {
      for (const rel of p[1]!.trim().split(/\s+/)) out[rel.toLowerCase()] = target;
    }
  }
  return out;
}
