/**
 * Client of the P2P manager's job API (its wire shapes are types.ts). Knows HTTP, the wire contract, auth
 * and typed errors; knows nothing about Kubernetes.
 *
 * - One undici `Pool` per manager (keep-alive connection reuse), at most `maxConcurrency` requests in flight
 *   toward it (the rest wait in FIFO order).
 * - The exchange itself is the shared HTTP layer's (src/http/): a time-out per request (headers and body
 *   included) composed with the caller's AbortSignal, bodies read with a size bound, one retry classification.
 * - Every failure is a {@link ManagerError} with a `kind` the caller acts on.
 * - Optional in-client retries (off by default: controllers requeue instead) honour `Retry-After`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { USER_AGENT } from '../version.ts';
import { Pool, type Dispatcher } from 'undici';
import { z } from 'zod';
import { AuthProvider, parseExpire, type AuthProviderOptions, type ManagerAuth } from './auth.ts';
import { kindForStatus } from '../http/classify.ts';
import { MANAGER_STATUS_EXCEPTIONS, ManagerError, extractManagerMessage } from './errors.ts';
import { parseBody } from '../http/body.ts';
import { INVALID_RESPONSE, UNUSABLE_RESPONSE_KIND } from '../http/classify.ts';
import { InFlightLimit } from '../http/limit.ts';
import { headerValue, sendRequest, type HttpResponse } from '../http/request.ts';
import { NO_RETRIES, parseRetryAfter, withRetries, type RetryOptions } from '../http/retry.ts';
import {
  JobListSchema,
  JobSchema,
  SignInResponseSchema,
  buildCreatePreheatBody,
  buildCreateTaskJobBody,
  type TaskJobRequest,
  normaliseJob,
  parseLinkHeader,
  type ArgsDialect,
  type JobPage,
  type LinkRel,
  type ListJobsQuery,
  type ManagerJob,
  type PreheatJobRequest,
} from './types.ts';

export type ManagerAPIPath = '/api/v1' | '/oapi/v1';

export interface ManagerClientOptions {
  /** Manager base address, e.g. `http://dragonfly-manager.dragonfly-system:8080` (a path prefix is kept). */
  baseURL: string;
  /** `/api/v1` (the first API; JWT sign-in from v2.4.1) or `/oapi/v1` (personal access tokens). Default `/api/v1`. */
  apiPath?: ManagerAPIPath;
  auth?: ManagerAuth;
  /** `current` sends `filtered_query_params` (v2.1.55+), `legacy` sends `filter`. Default `current`. */
  argsDialect?: ArgsDialect;
  /** Time-out of one HTTP request, ms. Default 30 s. */
  requestTimeoutMs?: number;
  /** Requests in flight toward this manager at most. Default 16. */
  maxConcurrency?: number;
  /** In-client retries of retryable failures. Default: none. */
  retry?: RetryOptions;
  /** Largest response body read. Default 16 MiB (src/http/body.ts). */
  maxResponseBytes?: number;
  /** JWT renewal tuning (sign-in auth). */
  authOptions?: AuthProviderOptions;
  /** Use this dispatcher instead of an own Pool (tests, proxies). Not closed by {@link ManagerClient.close}. */
  dispatcher?: Dispatcher;
  userAgent?: string;
}

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

export interface CallOptions {
  /** The caller's: aborting it ends the call (waits and retries included) with the signal's reason. */
  signal?: AbortSignal;
}

/** How long the real manager wants between two sign-ins (see #signIn). */
const SIGN_IN_SPACING_MS = 1_200;

export class ManagerClient {
  readonly baseURL: string;
  readonly apiPath: ManagerAPIPath;
  readonly argsDialect: ArgsDialect;
  readonly #origin: string;
  readonly #prefix: string;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #limit: InFlightLimit;
  readonly #timeoutMs: number;
  readonly #maxResponseBytes: number | undefined;
  readonly #retry: Required<RetryOptions>;
  readonly #auth: AuthProvider;
  readonly #userAgent: string;
  /** Scheduler clusters this manager has shown to exist (see verifySchedulerClusters). */
  readonly #knownClusters = new Set<number>();

  constructor(opts: ManagerClientOptions) {
    const base = new URL(opts.baseURL);
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new Error(`manager base URL must be http(s): ${base.protocol}`);
    }
    this.baseURL = opts.baseURL;
    this.#origin = base.origin;
    this.#prefix = base.pathname.replace(/\/+$/, '');
    this.apiPath = opts.apiPath ?? '/api/v1';
    this.argsDialect = opts.argsDialect ?? 'current';
    this.#timeoutMs = opts.requestTimeoutMs ?? 30_000;
    this.#maxResponseBytes = opts.maxResponseBytes;
    const max = opts.maxConcurrency ?? 16;
    this.#limit = new InFlightLimit(max);
    this.#retry = {
      attempts: opts.retry?.attempts ?? NO_RETRIES.attempts,
      minDelayMs: opts.retry?.minDelayMs ?? NO_RETRIES.minDelayMs,
      maxDelayMs: opts.retry?.maxDelayMs ?? NO_RETRIES.maxDelayMs,
    };
    this.#ownsDispatcher = opts.dispatcher === undefined;
    this.#dispatcher =
      opts.dispatcher ??
      new Pool(this.#origin, { connections: max, keepAliveTimeout: 30_000, pipelining: 1 });
    this.#userAgent = opts.userAgent ?? USER_AGENT;
    this.#auth = new AuthProvider(
      opts.auth ?? { type: 'none' },
      (username, password) => this.#signIn(username, password),
      opts.authOptions,
    );
  }

  /** Sign-ins performed so far (sign-in auth). */
  get signIns(): number {
    return this.#auth.signIns;
  }

  /** Most requests that were in flight at once (bounded by `maxConcurrency`). */
  get maxInFlight(): number {
    return this.#limit.peak;
  }

  /** `POST {apiPath}/jobs` with `type: preheat`. The manager answers 200 and the job (PENDING). */
  async createPreheatJob(req: PreheatJobRequest, call: CallOptions = {}): Promise<ManagerJob> {
    await this.verifySchedulerClusters(req.schedulerClusterIDs ?? [], call);
    const body = buildCreatePreheatBody(req, this.argsDialect);
    const secrets = [req.password, req.headers?.['Authorization'], req.headers?.['authorization']].filter(
      (s): s is string => typeof s === 'string',
    );
    const res = await this.#call('create preheat job', 'POST', '/jobs', { body, secrets, ...call });
    return this.#parseJob('create preheat job', res);
  }

  /** `POST {apiPath}/jobs` with `type: get_task`: asks every peer whether it holds the task (manager v2.1.x+). */
  async createGetTaskJob(req: TaskJobRequest, call: CallOptions = {}): Promise<ManagerJob> {
    return this.#createTaskJob('get_task', req, call);
  }

  /** `POST {apiPath}/jobs` with `type: delete_task`: removes the task from every peer that finished it. */
  async createDeleteTaskJob(req: TaskJobRequest, call: CallOptions = {}): Promise<ManagerJob> {
    return this.#createTaskJob('delete_task', req, call);
  }

  async #createTaskJob(
    type: 'get_task' | 'delete_task',
    req: TaskJobRequest,
    call: CallOptions,
  ): Promise<ManagerJob> {
    await this.verifySchedulerClusters(req.schedulerClusterIDs ?? [], call);
    const op = `create ${type} job`;
    const res = await this.#call(op, 'POST', '/jobs', { body: buildCreateTaskJobBody(type, req), ...call });
    return this.#parseJob(op, res);
  }

  /**
   * Looks each scheduler cluster up before a job names it, once per client: the real manager (v2.5.1) rate-limits
   * job creation per cluster BEFORE it validates the ids, so a job for an unknown cluster answers 429 text/plain
   * `rate limit exceeded` forever instead of 404. A 404 here is a {@link ManagerError} of kind `notFound` that
   * names the cluster. A lookup the credentials may not make (a personal access token without the `cluster` scope,
   * 401/403) proves nothing either way and is not an error: the job is created as before.
   */
  async verifySchedulerClusters(ids: readonly number[], call: CallOptions = {}): Promise<void> {
    // /oapi/v1 has no scheduler-cluster route; its `clusters` are keyed by the scheduler cluster id.
    const route = this.apiPath === '/oapi/v1' ? '/clusters' : '/scheduler-clusters';
    for (const id of ids) {
      if (this.#knownClusters.has(id)) continue;
      try {
        await this.#call(
          `look up scheduler cluster ${id}`,
          'GET',
          `${route}/${encodeURIComponent(String(id))}`,
          call,
        );
        this.#knownClusters.add(id);
      } catch (e) {
        if (!(e instanceof ManagerError)) throw e;
        if (e.kind === 'notFound') {
          throw new ManagerError({
            kind: 'notFound',
            status: e.status,
            operation: e.operation,
            managerMessage: `scheduler cluster ${id} does not exist on the manager (set spec.schedulerClusterIDs to existing clusters, or leave it empty for all)`,
          });
        }
        if (e.kind !== 'auth') throw e;
      }
    }
  }

  /**
   * `GET {apiPath}/jobs/{id}`. A `timeoutMs` makes one attempt bounded by it instead of the retrying call: for a
   * look that is only an optimisation and must not hold the caller up.
   */
  async getJob(id: number, call: CallOptions & { timeoutMs?: number } = {}): Promise<ManagerJob> {
    const op = `get job ${id}`;
    const res = await this.#call(op, 'GET', `/jobs/${encodeURIComponent(String(id))}`, {
      ...(call.timeoutMs !== undefined ? { attempts: 0, timeoutMs: call.timeoutMs } : {}),
      ...(call.signal ? { signal: call.signal } : {}),
    });
    return this.#parseJob(op, res);
  }

  /** `GET {apiPath}/jobs?page=&per_page=&type=&state=&user_id=` with its `Link` header. */
  async listJobs(query: ListJobsQuery = {}, call: CallOptions = {}): Promise<JobPage> {
    const q: Record<string, string> = {};
    if (query.page !== undefined) q['page'] = String(query.page);
    if (query.perPage !== undefined) q['per_page'] = String(query.perPage);
    if (query.type !== undefined) q['type'] = query.type;
    if (query.state !== undefined) q['state'] = query.state;
    if (query.userID !== undefined) q['user_id'] = String(query.userID);
    const res = await this.#call('list jobs', 'GET', '/jobs', { query: q, ...call });
    const list = this.#parseJSON('list jobs', res, JobListSchema);
    const raw = parseLinkHeader(headerValue(res.headers['link']));
    const links: JobPage['links'] = {};
    const pages: JobPage['pages'] = {};
    for (const rel of ['first', 'prev', 'next', 'last'] as LinkRel[]) {
      const target = raw[rel];
      if (target === undefined) continue;
      links[rel] = target;
      const page = Number(new URL(target, this.#origin).searchParams.get('page'));
      if (Number.isInteger(page) && page > 0) pages[rel] = page;
    }
    return { jobs: list.map(normaliseJob), links, pages };
  }

  /** `DELETE {apiPath}/jobs/:id`: removes the job record (the P2P cache stays). */
  async deleteJob(id: number, call: CallOptions = {}): Promise<void> {
    await this.#call(`delete job ${id}`, 'DELETE', `/jobs/${encodeURIComponent(String(id))}`, call);
  }

  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  #parseJob(op: string, res: HttpResponse): ManagerJob {
    return normaliseJob(this.#parseJSON(op, res, JobSchema));
  }

  #parseJSON<S extends z.ZodType>(op: string, res: HttpResponse, schema: S): z.output<S> {
    const parsed = parseBody(res.text, schema);
    if (parsed.ok) return parsed.data;
    throw new ManagerError({
      kind: UNUSABLE_RESPONSE_KIND,
      status: res.status,
      code: INVALID_RESPONSE,
      operation: op,
      managerMessage: parsed.problem,
    });
  }

  async #signIn(
    username: string,
    password: string,
  ): Promise<{ token: string; expiresAt: number | undefined }> {
    // Sign-in lives under /api/v1 whatever the job API prefix is. It is shared by every caller waiting for a token,
    // so no one caller's signal ends it.
    const signIn = () =>
      this.#send('sign-in', 'POST', `${this.#prefix}/api/v1/users/signin`, {
        body: { name: username, password },
        secrets: [password],
        auth: false,
      });
    let res: HttpResponse;
    try {
      res = await signIn();
    } catch (e) {
      // The real manager (v2.5.1) refuses a sign-in that comes within about a second of the previous one with the
      // same 401 as a wrong password (test/fixtures/dragonfly); a second try after that second tells them apart.
      if (!(e instanceof ManagerError) || e.status !== 401) throw e;
      await sleep(SIGN_IN_SPACING_MS);
      res = await signIn();
    }
    const data = this.#parseJSON('sign-in', res, SignInResponseSchema);
    return { token: data.token, expiresAt: parseExpire(data.expire) };
  }

  #call(
    op: string,
    method: Method,
    path: string,
    opts: {
      body?: unknown;
      query?: Record<string, string>;
      secrets?: string[];
      attempts?: number;
      timeoutMs?: number;
      signal?: AbortSignal;
    } = {},
  ): Promise<HttpResponse> {
    const fullPath = `${this.#prefix}${this.apiPath}${path}`;
    const retry = { ...this.#retry, attempts: opts.attempts ?? this.#retry.attempts };
    return withRetries(
      method,
      retry,
      () => this.#send(op, method, fullPath, { ...opts, auth: true }),
      opts.signal,
    );
  }

  /** One HTTP exchange, with auth (and one re-sign-in on 401 for JWT), under the in-flight bound. */
  async #send(
    op: string,
    method: Method,
    fullPath: string,
    opts: {
      body?: unknown;
      query?: Record<string, string>;
      secrets?: string[];
      timeoutMs?: number;
      signal?: AbortSignal;
      auth: boolean;
    },
  ): Promise<HttpResponse> {
    for (let authAttempt = 0; ; authAttempt++) {
      const material = opts.auth
        ? await this.#auth.material(opts.signal)
        : { headers: {}, query: {}, jwt: undefined };
      const secrets = [...this.#auth.secrets(), ...(opts.secrets ?? [])];
      const search = new URLSearchParams({ ...(opts.query ?? {}), ...material.query }).toString();
      const headers: Record<string, string> = {
        accept: 'application/json',
        'user-agent': this.#userAgent,
        ...material.headers,
      };
      let payload: string | undefined;
      if (opts.body !== undefined) {
        payload = JSON.stringify(opts.body);
        headers['content-type'] = 'application/json';
      }
      const res = await this.#limit.run(
        () =>
          sendRequest(
            {
              dispatcher: this.#dispatcher,
              origin: this.#origin,
              path: fullPath + (search ? `?${search}` : ''),
              method,
              headers,
              body: payload,
              timeoutMs: opts.timeoutMs ?? this.#timeoutMs,
              signal: opts.signal,
              maxResponseBytes: this.#maxResponseBytes,
              operation: op,
              secrets,
            },
            ManagerError.from,
          ),
        opts.signal,
      );
      if (res.status >= 200 && res.status < 300) return res;
      if (res.status === 401 && material.jwt !== undefined && authAttempt === 0) {
        // The JWT may have been revoked or the manager restarted with a new key: sign in once more.
        this.#auth.invalidate(material.jwt);
        continue;
      }
      const message = extractManagerMessage(res.text, secrets) || `HTTP ${res.status}`;
      throw new ManagerError({
        kind: kindForStatus(res.status, message, MANAGER_STATUS_EXCEPTIONS),
        status: res.status,
        operation: op,
        managerMessage: message,
        retryAfterMs:
          res.status === 429 || res.status === 503
            ? parseRetryAfter(headerValue(res.headers['retry-after']))
            : undefined,
      });
    }
  }
}
