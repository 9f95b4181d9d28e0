/**
 * Client of the P2P manager's job API (shared/contracts/manager-jobs.md). Knows HTTP, the wire contract, auth
 * and typed errors; knows nothing about Kubernetes.
 *
 * - One undici `Pool` per manager (keep-alive connection reuse), at most `maxConcurrency` requests in flight
 *   toward it (the rest wait in FIFO order), a time-out per request (headers and body included).
 * - Every failure is a {@link ManagerError} with a `kind` the caller acts on.
 * - Optional in-client retries (off by default: controllers requeue instead) honour `Retry-After`.
 */
import { USER_AGENT } from '../version.ts';
import { Pool, type Dispatcher } from 'undici';
import { z } from 'zod';
import { AuthProvider, parseExpire, type AuthProviderOptions, type ManagerAuth } from './auth.ts';
import { ManagerError, extractManagerMessage, kindForStatus, parseRetryAfter } from './errors.ts';
import { redact } from '../redact.ts';
import {
  JobListSchema,
  JobSchema,
  SignInResponseSchema,
  buildCreatePreheatBody,
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
  /** `/api/v1` (seed; JWT from v2.4.1) or `/oapi/v1` (personal access tokens). Default `/api/v1`. */
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
  /** JWT renewal tuning (sign-in auth). */
  authOptions?: AuthProviderOptions;
  /** Use this dispatcher instead of an own Pool (tests, proxies). Not closed by {@link ManagerClient.close}. */
  dispatcher?: Dispatcher;
  userAgent?: string;
}

export interface RetryOptions {
  /** Extra attempts after the first. */
  attempts: number;
  /** First back-off delay (doubled each attempt, jittered) when the manager gives no Retry-After. Default 500. */
  minDelayMs?: number;
  /** Longest wait; a larger Retry-After is not waited for: the error is thrown for the caller to requeue. */
  maxDelayMs?: number;
}

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/**
 * A FIFO counting semaphore. Hand-written: a dozen lines, and the client needs only acquire/release.
 */
class Semaphore {
  readonly #max: number;
  #active = 0;
  readonly #waiters: (() => void)[] = [];
  constructor(max: number) {
    this.#max = max;
  }
  get active(): number {
    return this.#active;
  }
  get waiting(): number {
    return this.#waiters.length;
  }
  async acquire(): Promise<void> {
    if (this.#active < this.#max) {
      this.#active++;
      return;
    }
    await new Promise<void>((resolve) => this.#waiters.push(resolve));
  }
  release(): void {
    const next = this.#waiters.shift();
    if (next) next();
    else this.#active--;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** How long the real manager wants between two sign-ins (see #signIn). */
const SIGN_IN_SPACING_MS = 1_200;

const NETWORK_RETRY_SAFE_FOR_POST = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_CONNECT_TIMEOUT',
]);

export class ManagerClient {
  readonly baseURL: string;
  readonly apiPath: ManagerAPIPath;
  readonly argsDialect: ArgsDialect;
  readonly #origin: string;
  readonly #prefix: string;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #semaphore: Semaphore;
  readonly #timeoutMs: number;
  readonly #retry: Required<RetryOptions>;
  readonly #auth: AuthProvider;
  readonly #userAgent: string;
  #maxInFlight = 0;
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
    const max = opts.maxConcurrency ?? 16;
    this.#semaphore = new Semaphore(max);
    this.#retry = {
      attempts: opts.retry?.attempts ?? 0,
      minDelayMs: opts.retry?.minDelayMs ?? 500,
      maxDelayMs: opts.retry?.maxDelayMs ?? 30_000,
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
    return this.#maxInFlight;
  }

  /** `POST {apiPath}/jobs` with `type: preheat`. The manager answers 200 and the job (PENDING). */
  async createPreheatJob(req: PreheatJobRequest): Promise<ManagerJob> {
    await this.verifySchedulerClusters(req.schedulerClusterIDs ?? []);
    const body = buildCreatePreheatBody(req, this.argsDialect);
    const secrets = [req.password, req.headers?.['Authorization'], req.headers?.['authorization']].filter(
      (s): s is string => typeof s === 'string',
    );
    const res = await this.#call('create preheat job', 'POST', '/jobs', { body, secrets });
    return this.#parseJob('create preheat job', res);
  }

  /**
   * Looks each scheduler cluster up before a job names it, once per client: the real manager (v2.5.1) rate-limits
   * job creation per cluster BEFORE it validates the ids, so a job for an unknown cluster answers 429 text/plain
   * `rate limit exceeded` forever instead of 404. A 404 here is a {@link ManagerError} of kind `notFound` that
   * names the cluster. A lookup the credentials may not make (a personal access token without the `cluster` scope,
   * 401/403) proves nothing either way and is not an error: the job is created as before.
   */
  async verifySchedulerClusters(ids: readonly number[]): Promise<void> {
    // /oapi/v1 has no scheduler-cluster route; its `clusters` are keyed by the scheduler cluster id.
    const route = this.apiPath === '/oapi/v1' ? '/clusters' : '/scheduler-clusters';
    for (const id of ids) {
      if (this.#knownClusters.has(id)) continue;
      try {
        await this.#call(
          `look up scheduler cluster ${id}`,
          'GET',
          `${route}/${encodeURIComponent(String(id))}`,
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
   * `GET {apiPath}/jobs/{id}`. `once` makes one attempt bounded by `timeoutMs` instead of the retrying call: for a
   * look that is only an optimisation and must not hold the caller up.
   */
  async getJob(id: number, once?: { timeoutMs: number }): Promise<ManagerJob> {
    const op = `get job ${id}`;
    const res = await this.#call(op, 'GET', `/jobs/${encodeURIComponent(String(id))}`, {
      ...(once ? { attempts: 0, timeoutMs: once.timeoutMs } : {}),
    });
    return this.#parseJob(op, res);
  }

  /** `GET {apiPath}/jobs?page=&per_page=&type=&state=&user_id=` with its `Link` header. */
  async listJobs(query: ListJobsQuery = {}): Promise<JobPage> {
    const q: Record<string, string> = {};
    if (query.page !== undefined) q['page'] = String(query.page);
    if (query.perPage !== undefined) q['per_page'] = String(query.perPage);
    if (query.type !== undefined) q['type'] = query.type;
    if (query.state !== undefined) q['state'] = query.state;
    if (query.userID !== undefined) q['user_id'] = String(query.userID);
    const res = await this.#call('list jobs', 'GET', '/jobs', { query: q });
    const list = this.#parseJSON('list jobs', res, JobListSchema);
    const raw = parseLinkHeader(headerString(res.headers['link']));
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
  async deleteJob(id: number): Promise<void> {
    await this.#call(`delete job ${id}`, 'DELETE', `/jobs/${encodeURIComponent(String(id))}`);
  }

  async close(): Promise<void> {
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  #parseJob(op: string, res: RawResponse): ManagerJob {
    return normaliseJob(this.#parseJSON(op, res, JobSchema));
  }

  #parseJSON<S extends z.ZodType>(op: string, res: RawResponse, schema: S): z.output<S> {
    let json: unknown;
    try {
      json = JSON.parse(res.text);
    } catch {
      throw badResponse(op, res.status, 'response is not JSON');
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid';
      throw badResponse(op, res.status, `unexpected response (${where})`);
    }
    return parsed.data;
  }

  async #signIn(
    username: string,
    password: string,
  ): Promise<{ token: string; expiresAt: number | undefined }> {
    // Sign-in lives under /api/v1 whatever the job API prefix is.
    const signIn = () =>
      this.#send('sign-in', 'POST', `${this.#prefix}/api/v1/users/signin`, {
        body: { name: username, password },
        secrets: [password],
        auth: false,
      });
    let res: RawResponse;
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

  async #call(
    op: string,
    method: Method,
    path: string,
    opts: {
      body?: unknown;
      query?: Record<string, string>;
      secrets?: string[];
      attempts?: number;
      timeoutMs?: number;
    } = {},
  ): Promise<RawResponse> {
    const fullPath = `${this.#prefix}${this.apiPath}${path}`;
    const attempts = opts.attempts ?? this.#retry.attempts;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#send(op, method, fullPath, { ...opts, auth: true });
      } catch (e) {
        if (!(e instanceof ManagerError) || !e.retryable || attempt >= attempts) throw e;
        // A POST is repeated only when the manager surely did not act on it.
        if (method === 'POST' && e.status !== 429 && !NETWORK_RETRY_SAFE_FOR_POST.has(e.code ?? '')) throw e;
        const backoff = Math.min(this.#retry.maxDelayMs, this.#retry.minDelayMs * 2 ** attempt);
        const delay = e.retryAfterMs ?? backoff * (0.5 + Math.random() / 2);
        if (delay > this.#retry.maxDelayMs) throw e;
        await sleep(delay);
      }
    }
  }

  /** One HTTP exchange, with auth (and one re-sign-in on 401 for JWT), under the concurrency bound. */
  async #send(
    op: string,
    method: Method,
    fullPath: string,
    opts: {
      body?: unknown;
      query?: Record<string, string>;
      secrets?: string[];
      timeoutMs?: number;
      auth: boolean;
    },
  ): Promise<RawResponse> {
    for (let authAttempt = 0; ; authAttempt++) {
      const material = opts.auth ? await this.#auth.material() : { headers: {}, query: {}, jwt: undefined };
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
      const res = await this.#exchange(
        op,
        method,
        fullPath + (search ? `?${search}` : ''),
        headers,
        payload,
        opts.timeoutMs ?? this.#timeoutMs,
      );
      if (res.status >= 200 && res.status < 300) return res;
      if (res.status === 401 && material.jwt !== undefined && authAttempt === 0) {
        // The JWT may have been revoked or the manager restarted with a new key: sign in once more.
        this.#auth.invalidate(material.jwt);
        continue;
      }
      const message = extractManagerMessage(res.text, secrets) || `HTTP ${res.status}`;
      throw new ManagerError({
        kind: kindForStatus(res.status, message),
        status: res.status,
        operation: op,
        managerMessage: message,
        retryAfterMs:
          res.status === 429 || res.status === 503
            ? parseRetryAfter(headerString(res.headers['retry-after']))
            : undefined,
      });
    }
  }

  async #exchange(
    op: string,
    method: Method,
    path: string,
    headers: Record<string, string>,
    body: string | undefined,
    timeoutMs: number,
  ): Promise<RawResponse> {
    await this.#semaphore.acquire();
    this.#maxInFlight = Math.max(this.#maxInFlight, this.#semaphore.active);
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const res = await this.#dispatcher.request({
        origin: this.#origin,
        path,
        method,
        headers,
        body: body ?? null,
        signal,
      });
      const text = await res.body.text();
      return { status: res.statusCode, headers: res.headers, text };
    } catch (e) {
      if (signal.aborted) {
        throw new ManagerError({
          kind: 'retryable',
          status: 0,
          code: 'TIMEOUT',
          operation: op,
          managerMessage: `no answer within ${timeoutMs} ms`,
          cause: e,
        });
      }
      const code = errorCode(e);
      throw new ManagerError({
        kind: 'retryable',
        status: 0,
        code,
        operation: op,
        managerMessage: redact(
          `cannot reach manager at ${this.#origin}: ${e instanceof Error ? e.message : String(e)}`,
          this.#auth.secrets(),
        ),
        cause: e,
      });
    } finally {
      this.#semaphore.release();
    }
  }
}

function headerString(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}

function errorCode(e: unknown): string {
  let cur: unknown = e;
  for (let i = 0; i < 4 && cur && typeof cur === 'object'; i++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    cur = (cur as { cause?: unknown }).cause;
  }
  return 'NETWORK';
}

function badResponse(op: string, status: number, message: string): ManagerError {
  // A proxy or a half-started manager answering garbage: worth retrying later.
  return new ManagerError({
    kind: 'retryable',
    status,
    code: 'BAD_RESPONSE',
    operation: op,
    managerMessage: message,
  });
}
