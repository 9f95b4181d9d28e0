/**
 * Manager emulator: the P2P manager's job API as the real manager (v2.5.1) answers it, for integration tests,
 * benchmarks and local development (its recorded answers are test/fixtures/dragonfly/, replayed by
 * test/unit/manager-replay.test.ts).
 *
 * - Routes under /api/v1 and /oapi/v1: POST/GET/GET-list (`Link` header)/PATCH/DELETE jobs, and
 *   `POST /api/v1/users/signin`. 200 on create (never 201), job JSON with `state` (or `status` by option),
 *   ids from 1, `task_id` `group_<uuid>`, defaults filled into args, `scheduler_clusters`.
 * - Errors and bodies of every row of the contract: 422 `{"errors"}` (and `Unknow type`), 404 (unknown job id,
 *   `scheduler cluster id 7: record not found`), 500 `invalid params: url is required` and
 *   `candidate schedulers not found`, 401 `{"message":"Unauthorized"}`, 403 PAT inactive/expired/scope,
 *   429 text/plain `rate limit exceeded`, 409 on a duplicate.
 * - Auth: /api/v1 without auth (manager <= v2.4.0) or JWT (v2.4.1+: sign-in, Bearer / cookie `jwt` / `?token=`);
 *   /oapi/v1 with personal access tokens (Bearer or `?access_token=`), scopes, expiry, inactive tokens.
 * - Preheat jobs REALLY download through the given peer proxies (`PeerProxy.preheat`): file `url`/`urls`;
 *   image: manifest resolved from the registry (basic auth from username/password or `headers.Authorization`,
 *   `platform` picked from an index), then every blob (config + layers). PENDING -> (RECEIVED, STARTED) ->
 *   SUCCESS/FAILURE with a v2.1.57+ snake_case `result` (PascalCase by option).
 * - Failure injection: FAILURE of the next N jobs, job latency, 5xx on the next N requests, 429 with
 *   Retry-After, per-request delay, downtime (`stop()` / `start()` on the same port). Counters per route.
 *
 * Everything is in memory and event driven (no polling loops): 1,000 jobs are cheap.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Agent } from 'undici';
import { jobBinding } from './manager-emulator-args.ts';
import { jobRunner } from './manager-emulator-jobs.ts';
import {
  HttpError,
  JWT_CHALLENGE,
  isObj,
  readBody,
  sleep,
  typeError,
  unauthorized,
  validation,
} from './manager-emulator-http.ts';
import {
  clusterViewJSON,
  dbTime,
  goNanoTime,
  rfc3339Seconds,
  schedulerClusterJSON,
  toPascal,
  userJSON,
} from './manager-json.ts';

export type * from './manager-emulator-types.ts';
import type {
  PersonalAccessToken,
  ManagerEmulatorOptions,
  EmulatedHolder,
  EmulatedJob,
  ManagerEmulatorCounters,
  RecordedManagerRequest,
  ManagerEmulator,
} from './manager-emulator-types.ts';

export async function startManagerEmulator(opts: ManagerEmulatorOptions = {}): Promise<ManagerEmulator> {
  const host = opts.host ?? '127.0.0.1';
  const peers = opts.peers ?? (opts.peer ? [opts.peer] : []);
  const nodePeers = opts.nodePeers ?? [];
  /** Per task id: the peers that hold it, by IP. */
  const holders = new Map<string, Map<string, EmulatedHolder>>();
  const hold = (taskID: string, h: EmulatedHolder) => {
    const m = holders.get(taskID) ?? new Map<string, EmulatedHolder>();
    m.set(h.ip, h);
    holders.set(taskID, m);
  };
  const statusField = opts.statusField ?? 'state';
  const resultCase = opts.resultCase ?? 'snake';
  const real = opts.version !== undefined;
  const { parseJSON, bindCreateJob, jobKind, taskOf } = jobBinding(real, opts.argsDialect ?? 'current');
  const apiAuth = opts.apiAuth ?? (real ? 'jwt' : 'none');
  const jobRateLimit = opts.jobRateLimit ?? 10;
  const now = opts.now ?? Date.now;
  const startedAt = now();
  const clusterDefaults = { createdAt: startedAt, jobRateLimit };
  /** A record's time: the real manager's database form (v2.5.1), or the contract's ISO string. */
  const stamp = (): string => (real ? dbTime(now()) : new Date(now()).toISOString());
  /** GCRA per cluster (redis_rate.PerSecond in the manager: burst = rate): the time the bucket is empty until. */
  const rateTAT = new Map<number, number>();
  const allowCreate = (clusterID: number): boolean => {
    const interval = 1000 / jobRateLimit;
    const t = now();
    const tat = Math.max(rateTAT.get(clusterID) ?? t, t);
    if (tat - t > interval * (jobRateLimit - 1)) return false;
    rateTAT.set(clusterID, tat + interval);
    return true;
  };
  const users = (opts.users ?? [{ name: 'root', password: 'dragonfly' }]).map((u, i) => ({
    id: u.id ?? i + 1,
    ...u,
  }));
  // The harness's manager (test/support/dragonfly.ts, stock manager.yaml) issues JWTs for 24 h.
  const jwtTTL = opts.jwtTTLms ?? (real ? 86_400_000 : 3_600_000);
  const clusters = opts.schedulerClusters ?? [{ id: 1, name: 'cluster-1' }];
  const runningStates = opts.runningStates ?? false;
  const agent = new Agent({ keepAliveTimeout: 5_000 });

  const tokens = new Map<string, PersonalAccessToken>();
  const addToken = (t: string | PersonalAccessToken) => {
    const pat = typeof t === 'string' ? { token: t } : t;
    tokens.set(pat.token, pat);
  };
  for (const t of opts.tokens ?? []) addToken(t);
  const jwts = new Map<string, { userID: number; expiresAt: number }>();

  const jobs = new Map<number, EmulatedJob>();
  let nextID = 1;
  let jobLatency = opts.jobLatencyMs ?? 0;
  let requestDelay = 0;
  const inject = {
    jobFailures: [] as string[],
    partial: 0,
    serverErrors: [] as { status: number; message: string }[],
    rateLimit: [] as (number | undefined)[],
  };
  const newCounters = (): ManagerEmulatorCounters => ({
    requests: 0,
    creates: 0,
    gets: 0,
    lists: 0,
    patches: 0,
    deletes: 0,
    signIns: 0,
    byRoute: {},
    maxInFlight: 0,
  });
  const counters = newCounters();
  const clockWaiters = new Set<{ at: number; wake: () => void }>();
  /** Waits `ms` of job latency on the job clock (see `jobClock`); 0: the next turn of the event loop. */
  function waitJobClock(ms: number): Promise<void> {
    if (ms <= 0) return new Promise<void>((r) => setImmediate(r));
    if (opts.jobClock !== 'now') return sleep(ms);
    const at = now() + ms;
    return new Promise<void>((wake) => clockWaiters.add({ at, wake }));
  }
  function tick(): void {
    const t = now();
    for (const w of clockWaiters) {
      if (w.at <= t) {
        clockWaiters.delete(w);
        w.wake();
      }
    }
  }
  const log: RecordedManagerRequest[] = [];
  let inFlight = 0;

  // ---------------------------------------------------------------- serialisation

  /**
   * A job as one route answers it. The real manager (v2.5.1) answers a create with the record it inserted (no
   * `result` yet, relations as given), a get with the record read back (seed peer and scheduler clusters preloaded)
   * and a list without relations.
   */
  function jobJSON(job: EmulatedJob, view: 'create' | 'get' | 'list' = 'get'): Record<string, unknown> {
    return real ? realJobJSON(job, view) : contractJobJSON(job);
  }

  function realJobJSON(job: EmulatedJob, view: 'create' | 'get' | 'list'): Record<string, unknown> {
    const user = view === 'create' ? undefined : users.find((u) => job.user_id !== 0 && u.id === job.user_id);
    return {
      id: job.id,
      created_at: job.created_at,
      updated_at: job.updated_at,
      is_del: 0,
      task_id: job.task_id,
      bio: job.bio,
      type: job.type,
      state: job.state,
      args: job.args,
      result: view === 'create' ? null : job.result,
      user_id: job.user_id,
      user: userJSON(user, startedAt),
      seed_peer_clusters: view === 'get' ? job.seed_peer_clusters : null,
      scheduler_clusters:
        view === 'list' ? null : job.scheduler_clusters.map((c) => schedulerClusterJSON(c, clusterDefaults)),
    };
  }

  function contractJobJSON(job: EmulatedJob): Record<string, unknown> {
    const { internal: _internal, state, result, ...rest } = job;
    const out: Record<string, unknown> = { ...rest };
    // Keep the field order of the real JSON: ... type, state, args, result ...
    const ordered: Record<string, unknown> = {};
    for (const k of ['id', 'created_at', 'updated_at', 'task_id', 'bio', 'type']) ordered[k] = out[k];
    ordered[statusField] = state;
    ordered['args'] = job.args;
    ordered['result'] = result && resultCase === 'pascal' ? toPascal(result) : result;
    ordered['user_id'] = job.user_id;
    ordered['scheduler_clusters'] = job.scheduler_clusters;
    ordered['seed_peer_clusters'] = job.seed_peer_clusters;
    return ordered;
  }

  // ---------------------------------------------------------------- auth

  function bearer(req: IncomingMessage): string | undefined {
    const m = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? '');
    return m ? m[1]!.trim() : undefined;
  }

  function checkPAT(req: IncomingMessage, query: URLSearchParams, scope: string): void {
    const token = bearer(req) ?? query.get('access_token') ?? undefined;
    if (!token) throw unauthorized();
    const pat = tokens.get(token);
    if (!pat) throw unauthorized();
    if (pat.active === false) throw new HttpError(403, { message: 'Token is inactive' });
    if (pat.expiresAt !== undefined && now() >= pat.expiresAt) {
      throw new HttpError(403, { message: 'Token has expired' });
    }
    if (pat.scopes && pat.scopes.length > 0 && !pat.scopes.includes(scope)) {
      throw new HttpError(403, { message: `Token does not have the ${scope} scope` });
    }
  }

  /**
   * Returns the signed-in user id (0 without auth). The real manager's JWT middleware (v2.5.1) answers every refusal
   * 401 `Unauthorized` with its realm as the challenge.
   */
  function checkJWT(req: IncomingMessage, query: URLSearchParams): number {
    if (apiAuth === 'none') return 0;
    const refused = (contractMessage: string) =>
      real
        ? new HttpError(401, { message: 'Unauthorized' }, { headers: JWT_CHALLENGE })
        : new HttpError(401, { message: contractMessage });
    const cookie = /(?:^|;\s*)jwt=([^;]+)/.exec(req.headers.cookie ?? '')?.[1];
    const token = bearer(req) ?? cookie ?? query.get('token') ?? undefined;
    if (!token) throw refused('Unauthorized');
    const session = jwts.get(token);
    if (!session) throw refused('Unauthorized');
    if (now() >= session.expiresAt) throw refused('Token is expired');
    return session.userID;
  }

  // ---------------------------------------------------------------- create

  function selectClusters(body: Record<string, unknown>): { id: number; name: string }[] {
    const raw = body['scheduler_cluster_ids'];
    const ids = (raw as number[] | null | undefined) ?? [];
    if (ids.length === 0) {
      if (clusters.length === 0) throw new HttpError(500, { message: 'candidate schedulers not found' });
      return clusters;
    }
    return ids.map((id) => {
      const c = clusters.find((x) => x.id === id);
      if (!c) throw new HttpError(404, { message: `scheduler cluster id ${id}: record not found` });
      return c;
    });
  }

  function createJob(bodyText: string, userID: number): EmulatedJob {
    const body = bindCreateJob(bodyText);
    const type = body['type'] as string;
    const kind = jobKind(type);
    if (!kind) throw new HttpError(422, { errors: 'Unknow type' });
    const args = kind.bind(body['args']);
    const selected = selectClusters(body);
    kind.check(args);
    const created = stamp();
    let resolveDone!: () => void;
    const done = new Promise<void>((r) => (resolveDone = r));
    const groupCreatedAt = goNanoTime(now());
    const job: EmulatedJob = {
      id: nextID++,
      created_at: created,
      updated_at: created,
      task_id: `group_${randomUUID()}`,
      bio: (body['bio'] as string | undefined) ?? '',
      type,
      state: 'PENDING',
      args,
      result: null,
      // The contract's emulator stamps the signed-in user; the real manager keeps the body's (default 0).
      user_id: (body['user_id'] as number | undefined) ?? (real ? 0 : userID),
      scheduler_clusters: selected.map((c) => ({ ...c })),
      seed_peer_clusters: [],
      internal: { urls: [], taskIDs: {}, done, taskUUID: `task_${randomUUID()}`, groupCreatedAt },
    };
    // The real manager polls the group at once after the insert: a get right after the create shows the PENDING
    // group (the create's own answer has no result).
    if (real && type === 'preheat') job.result = realResult(job, 'PENDING', '', null);
    jobs.set(job.id, job);
    void runJob(job).finally(resolveDone);
    return job;
  }

  // ---------------------------------------------------------------- running a job

  const { runJob, realResult } = jobRunner({
    real,
    peers,
    nodePeers,
    holders,
    hold,
    now,
    stamp,
    runningStates,
    agent,
    jobs,
    latency: () => jobLatency,
    inject,
    waitJobClock,
    taskOf,
  });

  /**
   * The real manager's create middleware (v2.5.1 manager/middlewares/ratelimiter.go): it binds the body first and
   * writes a 422 without aborting, so the handler binds again and writes its own 422 after it (two JSON objects in
   * one body); then every named scheduler cluster must pass its limiter, and an unknown one never does.
   */
  function realRateLimiter(bodyText: string): void {
    let body: Record<string, unknown>;
    try {
      body = bindCreateJob(bodyText);
    } catch (e) {
      if (!(e instanceof HttpError) || e.status !== 422) throw e;
      const text = JSON.stringify(e.body);
      throw new HttpError(422, text + text, { raw: true });
    }
    const ids = Array.isArray(body['scheduler_cluster_ids']) ? body['scheduler_cluster_ids'] : [];
    for (const id of ids) {
      if (!clusters.some((c) => c.id === id) || !allowCreate(id as number)) {
        throw new HttpError(429, 'rate limit exceeded', { text: true });
      }
    }
  }

  // ---------------------------------------------------------------- router

  function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    const text = body === undefined ? '' : JSON.stringify(body);
    res.writeHead(status, {
      ...headers,
      ...(text ? { 'content-type': 'application/json; charset=utf-8' } : {}),
      'content-length': String(Buffer.byteLength(text)),
    });
    res.end(text);
  }

  function parseID(raw: string): number {
    if (!/^[0-9]+$/.test(raw)) {
      throw new HttpError(422, { errors: `strconv.ParseUint: parsing "${raw}": invalid syntax` });
    }
    return Number(raw);
  }

  function findJob(id: number): EmulatedJob {
    const job = jobs.get(id);
    if (!job) throw new HttpError(404, { message: 'record not found' });
    return job;
  }

  /**
   * `page` and `per_page` as the real manager (v2.5.1) binds them: `omitempty,gte=1` makes 0 mean absent, and
   * absent is page 1 of 10.
   */
  function realPagination(query: URLSearchParams): { page: number; perPage: number } {
    const int = (key: string, field: string, max: number, fallback: number) => {
      const raw = query.get(key) ?? '0';
      if (!/^[-+]?[0-9]+$/.test(raw))
        throw new HttpError(422, {
          errors: `strconv.ParseInt: parsing ${JSON.stringify(raw)}: invalid syntax`,
        });
      const n = Number(raw);
      if (n < 0) throw validation('GetJobsQuery', field, 'gte');
      if (n > max) throw validation('GetJobsQuery', field, 'lte');
      return n === 0 ? fallback : n;
    };
    return {
      page: int('page', 'Page', Number.MAX_SAFE_INTEGER, 1),
      perPage: int('per_page', 'PerPage', 10_000_000, 10),
    };
  }

  function contractPagination(query: URLSearchParams): { page: number; perPage: number } {
    const pageRaw = query.get('page') ?? '1';
    const perPageRaw = query.get('per_page') ?? '10';
    if (!/^[0-9]+$/.test(pageRaw) || Number(pageRaw) < 1) throw validation('GetJobsQuery', 'Page', 'min');
    if (!/^[0-9]+$/.test(perPageRaw) || Number(perPageRaw) < 1 || Number(perPageRaw) > 10_000_000) {
      throw validation('GetJobsQuery', 'PerPage', 'min');
    }
    return { page: Number(pageRaw), perPage: Number(perPageRaw) };
  }

  function list(res: ServerResponse, prefix: string, query: URLSearchParams) {
    const { page, perPage } = real ? realPagination(query) : contractPagination(query);
    const type = query.get('type');
    const state = query.get('state');
    const userID = query.get('user_id');
    const all = [...jobs.values()]
      .filter(
        (j) =>
          (!type || j.type === type) &&
          (!state || j.state === state) &&
          (!userID || String(j.user_id) === userID),
      )
      .sort((a, b) => b.id - a.id);
    const total = all.length;
    const totalPages = Math.max(1, Math.ceil(total / perPage));
    const items = all.slice((page - 1) * perPage, page * perPage);
    const link = (p: number) => {
      const q = new URLSearchParams({ page: String(p), per_page: String(perPage) });
      for (const [k, v] of query)
        if (k !== 'page' && k !== 'per_page' && k !== 'access_token' && k !== 'token') q.append(k, v);
      return `<${prefix}/jobs?${q.toString()}>`;
    };
    const header = [
      `${link(Math.max(1, page - 1))};rel=prev`,
      `${link(Math.min(totalPages, page + 1))};rel=next`,
      `${link(1)};rel=first`,
      `${link(totalPages)};rel=last`,
    ].join(',');
    json(
      res,
      200,
      items.map((j) => jobJSON(j, 'list')),
      { link: header },
    );
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const u = new URL(req.url ?? '/', 'http://manager');
    const path = u.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';
    const bodyText = await readBody(req);
    const entry: RecordedManagerRequest = {
      method,
      path: u.pathname,
      query: Object.fromEntries(u.searchParams),
      headers: Object.fromEntries(
        Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : (v ?? '')]),
      ),
      body: bodyText,
      status: 0,
    };
    log.push(entry);
    if (log.length > 10_000) log.shift();
    res.once('finish', () => (entry.status = res.statusCode));

    if (path === '/api/v1/users/signin' && method === 'POST') {
      counters.signIns++;
      counters.byRoute['POST /api/v1/users/signin'] =
        (counters.byRoute['POST /api/v1/users/signin'] ?? 0) + 1;
      let body: unknown;
      try {
        body = JSON.parse(bodyText);
      } catch {
        body = undefined;
      }
      const name = isObj(body) ? body['name'] : undefined;
      const password = isObj(body) ? body['password'] : undefined;
      const challenge = { headers: JWT_CHALLENGE };
      if (typeof name !== 'string' || typeof password !== 'string' || !name || !password) {
        if (real) throw new HttpError(401, { message: 'Unauthorized' }, challenge);
        throw new HttpError(401, { code: 401, message: 'missing Username or Password' });
      }
      const user = users.find((x) => x.name === name && x.password === password);
      if (!user) {
        if (real) throw new HttpError(401, { message: 'Unauthorized' }, challenge);
        throw new HttpError(401, { code: 401, message: 'incorrect Username or Password' });
      }
      const token = randomBytes(24).toString('base64url');
      const expiresAt = now() + jwtTTL;
      jwts.set(token, { userID: user.id, expiresAt });
      if (real) json(res, 200, { expire: rfc3339Seconds(expiresAt), token });
      else json(res, 200, { code: 200, expire: new Date(expiresAt).toISOString(), token });
      return;
    }

    // Scheduler cluster look-ups: /api/v1/scheduler-clusters/:id (JWT) and /oapi/v1/clusters/:id (PAT, scope
    // `cluster`); the real manager answers an unknown id 404 `record not found`.
    const cm = /^\/(?:api\/v1\/scheduler-clusters|(oapi)\/v1\/clusters)\/([^/]+)$/.exec(path);
    if (cm && method === 'GET') {
      const routeKey = cm[1] ? 'GET /oapi/v1/clusters/:id' : 'GET /api/v1/scheduler-clusters/:id';
      counters.byRoute[routeKey] = (counters.byRoute[routeKey] ?? 0) + 1;
      if (cm[1]) checkPAT(req, u.searchParams, 'cluster');
      else checkJWT(req, u.searchParams);
      const cluster = clusters.find((c) => c.id === parseID(cm[2]!));
      if (!cluster) throw new HttpError(404, { message: 'record not found' });
      if (!real)
        json(res, 200, { id: cluster.id, name: cluster.name, bio: '', is_default: cluster.id === 1 });
      else if (cm[1]) json(res, 200, clusterViewJSON(cluster, clusterDefaults));
      else json(res, 200, schedulerClusterJSON(cluster, clusterDefaults, true));
      return;
    }

    const m = /^\/(api|oapi)\/v1\/jobs(?:\/([^/]+))?$/.exec(path);
    if (!m) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found');
      return;
    }
    const prefix = `/${m[1]}/v1`;
    const idRaw = m[2];
    const routeKey = `${method} ${prefix}/jobs${idRaw !== undefined ? '/:id' : ''}`;
    counters.byRoute[routeKey] = (counters.byRoute[routeKey] ?? 0) + 1;

    const allowed = idRaw === undefined ? ['GET', 'POST'] : ['GET', 'PATCH', 'DELETE'];
    if (!allowed.includes(method)) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('404 page not found');
      return;
    }

    let userID = 0;
    if (m[1] === 'oapi') checkPAT(req, u.searchParams, 'job');
    else userID = checkJWT(req, u.searchParams);

    const injected = inject.serverErrors.shift();
    if (injected) throw new HttpError(injected.status, { message: injected.message });

    if (idRaw === undefined && method === 'POST') {
      if (real) realRateLimiter(bodyText);
      if (inject.rateLimit.length > 0) {
        const retryAfter = inject.rateLimit.shift();
        throw new HttpError(429, 'rate limit exceeded', {
          text: true,
          headers: retryAfter !== undefined ? { 'retry-after': String(retryAfter) } : {},
        });
      }
      counters.creates++;
      const job = createJob(bodyText, userID);
      json(res, 200, jobJSON(job, 'create'));
      return;
    }
    if (idRaw === undefined) {
      counters.lists++;
      list(res, prefix, u.searchParams);
      return;
    }
    const id = parseID(idRaw);
    if (method === 'GET') {
      counters.gets++;
      json(res, 200, jobJSON(findJob(id)));
      return;
    }
    if (method === 'PATCH') {
      counters.patches++;
      const job = findJob(id);
      const body = parseJSON(bodyText);
      if (!isObj(body)) throw new HttpError(422, { errors: 'invalid body' });
      if (body['bio'] !== undefined) {
        if (typeof body['bio'] !== 'string') throw typeError('UpdateJobRequest.bio', 'string', body['bio']);
        job.bio = body['bio'];
      }
      if (body['user_id'] !== undefined) {
        if (typeof body['user_id'] !== 'number')
          throw typeError('UpdateJobRequest.user_id', 'uint', body['user_id']);
        job.user_id = body['user_id'];
      }
      job.updated_at = stamp();
      json(res, 200, jobJSON(job, 'list'));
      return;
    }
    counters.deletes++;
    findJob(id);
    jobs.delete(id);
    res.writeHead(200, { 'content-length': '0' }).end();
  }

  // ---------------------------------------------------------------- server

  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = opts.port ?? 0;

  const handler = (req: IncomingMessage, res: ServerResponse) => {
    counters.requests++;
    inFlight++;
    counters.maxInFlight = Math.max(counters.maxInFlight, inFlight);
    const finish = () => {
      inFlight--;
    };
    res.once('close', finish);
    void (async () => {
      if (requestDelay > 0) await sleep(requestDelay);
      await route(req, res);
    })().catch((e: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (e instanceof HttpError) {
        if (e.text || e.raw) {
          const type = e.raw ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8';
          res.writeHead(e.status, { 'content-type': type, ...e.headers }).end(String(e.body));
        } else {
          json(res, e.status, e.body, e.headers);
        }
        return;
      }
      json(res, 500, { message: e instanceof Error ? e.message : String(e) });
    });
  };

  async function listen(): Promise<void> {
    const s = createServer(handler);
    s.keepAliveTimeout = 5_000;
    s.on('connection', (sock) => {
      sockets.add(sock);
      sock.once('close', () => sockets.delete(sock));
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, host, () => {
        s.off('error', reject);
        resolve();
      });
    });
    port = (s.address() as AddressInfo).port;
    server = s;
  }

  async function stop(): Promise<void> {
    const s = server;
    if (!s) return;
    server = undefined;
    const closed = new Promise<void>((resolve) => s.close(() => resolve()));
    for (const sock of sockets) sock.destroy();
    sockets.clear();
    await closed;
  }

  await listen();

  return {
    url: `http://${host}:${port}`,
    port,
    jobs,
    counters,
    log,
    async waitForJob(id: number): Promise<EmulatedJob> {
      const job = findJob(id);
      await job.internal.done;
      return job;
    },
    injectJobFailures(count: number, message = 'injected failure: seed peer download failed') {
      for (let i = 0; i < count; i++) inject.jobFailures.push(message);
    },
    injectPartialFailures(count: number) {
      inject.partial += count;
    },
    setJobLatency(ms: number) {
      jobLatency = ms;
    },
    tick,
    injectServerErrors(count: number, status = 500, message = 'internal server error') {
      for (let i = 0; i < count; i++) inject.serverErrors.push({ status, message });
    },
    injectRateLimit(count: number, retryAfterSeconds?: number) {
      for (let i = 0; i < count; i++) inject.rateLimit.push(retryAfterSeconds);
    },
    setRequestDelay(ms: number) {
      requestDelay = ms;
    },
    addToken,
    revokeJWTs() {
      jwts.clear();
    },
    stop,
    async start() {
      if (!server) await listen();
    },
    reset() {
      jobs.clear();
      nextID = 1;
      inject.jobFailures.length = 0;
      inject.partial = 0;
      inject.serverErrors.length = 0;
      inject.rateLimit.length = 0;
      Object.assign(counters, newCounters());
      log.length = 0;
      holders.clear();
    },
    holders(taskID: string) {
      return [...(holders.get(taskID)?.values() ?? [])];
    },
    async close() {
      await stop();
      await agent.close();
    },
  };
}
