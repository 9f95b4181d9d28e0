/**
 * Client of one model-server replica's management API (TorchServe; shared/contracts/model-server.md), plus the
 * endpoint plugin's register call (seed 4.3). Knows nothing of Kubernetes: a replica is a base URL and a token.
 *
 * Many replicas share one pooled undici dispatcher ({@link sharedModelServerAgent} unless one is given), so a
 * fan-out to hundreds of replicas keeps a bounded number of sockets per replica. Every response is validated
 * (zod) and every failure is a typed {@link ModelServerError}.
 *
 * A client is a cheap object; create one per replica when needed. Its {@link TokenSource}, however, should live
 * as long as the replica does (one per replica, kept across reconciles): renewal is single-flight per source.
 */
import { USER_AGENT } from '../version.ts';
import { Agent, type Dispatcher } from 'undici';
import { z } from 'zod';
import { type TokenContext, type TokenSource, TokenUnavailableError, staticToken } from './auth.ts';
import {
  INVALID_KEY_EXCEPTION,
  ModelServerError,
  type ModelServerErrorKind,
  boundMessage,
  isModelServerError,
  kindForStatus,
  networkCode,
} from './errors.ts';

/** Path of the peerload endpoint plugin. */
export const DEFAULT_PLUGIN_PATH = 'p2p';
/** Path of the older third-party plugin (answers 200 on failures, body may be invalid JSON). */
export const LEGACY_PLUGIN_PATH = 'dragonfly';

// ---------------------------------------------------------------------------------------------------------------
// Wire schemas

const StatusBody = z.looseObject({ status: z.string() });

const ErrorBody = z.looseObject({
  code: z.number().optional(),
  type: z.string().optional(),
  message: z.string().optional(),
  Status: z.string().optional(),
  status: z.string().optional(),
});

/** The plugin's register answer (seed 2.4): `Status`, plus `TaskID`/`CacheHit` from the peer proxy (p2p). */
const PluginBody = z.looseObject({
  Status: z.string().optional(),
  status: z.string().optional(),
  TaskID: z.string().optional(),
  CacheHit: z.union([z.boolean(), z.string()]).optional(),
  type: z.string().optional(),
});

/**
 * The plugin's answer to a POST for an object key it is downloading already (for an earlier request, e.g. of an
 * operator that restarted): HTTP 202 with `{"code": 202, "type": "DownloadInProgress", "message": ...,
 * "Status": ...}`. Nothing new was started; the caller asks again later and gets the registration's outcome
 * (409 once the earlier request registered the model); the README documents it.
 */
export const DOWNLOAD_IN_PROGRESS = 'DownloadInProgress';

const Str = z.union([z.string(), z.number()]).transform(String);

export const WorkerDescription = z.looseObject({
  id: Str.optional(),
  startTime: z.string().optional(),
  /** "READY" or "UNLOADING"; a worker that is still starting shows UNLOADING. */
  status: z.string(),
  memoryUsage: z.number().optional(),
  pid: z.number().optional(),
  gpu: z.boolean().optional(),
  gpuUsage: z.string().optional(),
});
export type WorkerDescription = z.infer<typeof WorkerDescription>;

export const ModelDescription = z.looseObject({
  modelName: z.string(),
  modelVersion: Str,
  modelUrl: z.string().optional(),
  runtime: z.string().optional(),
  minWorkers: z.number(),
  maxWorkers: z.number(),
  batchSize: z.number().optional(),
  maxBatchDelay: z.number().optional(),
  responseTimeout: z.number().optional(),
  startupTimeout: z.number().optional(),
  loadedAtStartup: z.boolean().optional(),
  workers: z
    .array(WorkerDescription)
    .nullish()
    .transform((w) => w ?? []),
  jobQueueStatus: z.looseObject({ remainingCapacity: z.number(), pendingRequests: z.number() }).optional(),
});
export type ModelDescription = z.infer<typeof ModelDescription>;

const DescribeBody = z.array(ModelDescription);

export const ModelSummary = z.looseObject({ modelName: z.string(), modelUrl: z.string().optional() });
export type ModelSummary = z.infer<typeof ModelSummary>;

const ListBody = z.looseObject({
  nextPageToken: Str.optional(),
  models: z
    .array(ModelSummary)
    .nullish()
    .transform((m) => m ?? []),
});

// ---------------------------------------------------------------------------------------------------------------
// Public types

export interface RegisterRequest {
  /** Object key in the model store bucket, sent as `file_name` (seed 4.3). */
  fileName: string;
  modelName?: string;
  runtime?: string;
  handler?: string;
  batchSize?: number;
  /** Milliseconds. */
  maxBatchDelay?: number;
  /** Seconds. */
  responseTimeout?: number;
  /** Seconds (TorchServe 0.12+). */
  startupTimeout?: number;
  /** Default (server side) 0: the seed's flow registers with 0 workers and scales afterwards. */
  initialWorkers?: number;
  synchronous?: boolean;
}

export interface RegisterResult {
  httpStatus: number;
  /** The server's message. */
  status: string;
  /** From the registration message `Model "X" Version: V registered with N initial workers`, when present. */
  modelName?: string | undefined;
  version?: string | undefined;
  initialWorkers?: number | undefined;
  /** 202/206: workers were requested with the registration and are not all started yet. */
  workersPending: boolean;
  /** Peer proxy task id of the download (p2p plugin). */
  taskID?: string | undefined;
  /** The download was served from the peer's cache (p2p plugin). */
  cacheHit?: boolean | undefined;
  /** The plugin is downloading this object key for an earlier request: nothing registered yet, ask again later. */
  inProgress?: boolean;
}

export interface ScaleRequest {
  minWorker: number;
  /** Default (server side): minWorker. */
  maxWorker?: number;
  /** Server default false: answer 202 at once. True: wait for the workers (200, or 206 still in progress). */
  synchronous?: boolean;
}

export interface ScaleResult {
  httpStatus: number;
  status: string;
  /** 202 accepted (async), 200 scaled (sync, done), 206 in progress (sync, not done). */
  state: 'accepted' | 'scaled' | 'inProgress';
}

export interface StatusResult {
  httpStatus: number;
  status: string;
}

export interface ModelListPage {
  models: ModelSummary[];
  nextPageToken?: string | undefined;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Overrides the client's time-out for this call (whole request: connect, headers and body). */
  timeoutMs?: number;
}

export interface ModelServerClientOptions {
  /** Management base URL of one replica, e.g. `http://10.0.0.7:8081`. */
  baseURL: string | URL;
  /** Path of the endpoint plugin: `p2p` (default) or `dragonfly` (older third-party plugin). */
  pluginPath?: string;
  /** Management key: a fixed key or a {@link TokenSource}. None: no Authorization header. */
  token?: string | TokenSource;
  /** Shared connection pool. Default: {@link sharedModelServerAgent}. */
  dispatcher?: Dispatcher;
  /** Per-request time-out. Default 30 s. */
  timeoutMs?: number;
  /** Time-out of register (the plugin downloads the model before answering). Default 30 min. */
  registerTimeoutMs?: number;
  /** Largest response body read. Default 16 MiB. */
  maxResponseBytes?: number;
}

// ---------------------------------------------------------------------------------------------------------------
// Dispatcher

export interface ModelServerAgentOptions {
  /** Sockets per replica. Default 4. */
  connections?: number;
  keepAliveTimeoutMs?: number;
  connectTimeoutMs?: number;
}

/** A pooled dispatcher for many replicas (one pool of `connections` sockets per origin). */
export function createModelServerAgent(opts: ModelServerAgentOptions = {}): Agent {
  return new Agent({
    connections: opts.connections ?? 4,
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 4_000,
    connect: { timeout: opts.connectTimeoutMs ?? 5_000 },
  });
}

let sharedAgent: Agent | undefined;

/** The process-wide dispatcher used by clients that are not given one. */
export function sharedModelServerAgent(): Agent {
  sharedAgent ??= createModelServerAgent();
  return sharedAgent;
}

/** Closes the process-wide dispatcher (shutdown); a later client creates a new one. */
export async function closeSharedModelServerAgent(): Promise<void> {
  const a = sharedAgent;
  sharedAgent = undefined;
  await a?.close();
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers on descriptions

export interface WorkerCounts {
  ready: number;
  /** Not READY yet (TorchServe shows a starting worker as UNLOADING). */
  notReady: number;
  total: number;
}

/**
 * Worker counts of a description (or of the entries of a describe answer, optionally only `version`).
 * Only `READY` counts as ready: a starting worker shows `UNLOADING`.
 */
export function workerCounts(
  desc: ModelDescription | readonly ModelDescription[],
  version?: string,
): WorkerCounts {
  const list = Array.isArray(desc) ? (desc as readonly ModelDescription[]) : [desc as ModelDescription];
  let ready = 0;
  let total = 0;
  for (const d of list) {
    if (version !== undefined && d.modelVersion !== version) continue;
    for (const w of d.workers) {
      total++;
      if (w.status === 'READY') ready++;
    }
  }
  return { ready, notReady: total - ready, total };
}

/** Number of READY workers (see {@link workerCounts}). */
export function readyWorkers(desc: ModelDescription | readonly ModelDescription[], version?: string): number {
  return workerCounts(desc, version).ready;
}

/** TorchServe's registration message, as sent by its model API and by both plugins. */
const REGISTERED = /^Model "(.+)" Version: (\S+) registered with (\d+) initial workers\b/;

/** Parses `Model "X" Version: V registered with N initial workers...`; undefined for any other text. */
export function parseRegisteredMessage(
  status: string,
): { modelName: string; version: string; initialWorkers: number } | undefined {
  const m = REGISTERED.exec(status.trim());
  if (!m) return undefined;
  return { modelName: m[1]!, version: m[2]!, initialWorkers: Number(m[3]) };
}

/**
 * The `Status` text of a plugin answer. The third-party plugin formats `{"Status": "%s"}` by hand, so a message
 * holding quotes (its success message does: `Model "X" ...`) is invalid JSON; the text is then taken between
 * the first `"Status": "` and the last `"`.
 */
export function extractPluginStatus(body: string): {
  status?: string;
  validJSON: boolean;
  taskID?: string;
  cacheHit?: boolean;
  type?: string;
} {
  try {
    const parsed = PluginBody.safeParse(JSON.parse(body));
    if (parsed.success) {
      const d = parsed.data;
      const cacheHit =
        d.CacheHit === undefined ? undefined : d.CacheHit === true || String(d.CacheHit) === 'true';
      return {
        validJSON: true,
        ...(d.Status !== undefined || d.status !== undefined ? { status: d.Status ?? d.status } : {}),
        ...(d.TaskID !== undefined ? { taskID: d.TaskID } : {}),
        ...(cacheHit !== undefined ? { cacheHit } : {}),
        ...(d.type !== undefined ? { type: d.type } : {}),
      };
    }
    return { validJSON: true };
  } catch {
    const m = /^\s*\{\s*"Status"\s*:\s*"([\s\S]*)"\s*\}\s*$/.exec(body);
    return m ? { validJSON: false, status: m[1]! } : { validJSON: false };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Client

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

interface Exchange {
  operation: string;
  method: Dispatcher.HttpMethod;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  timeoutMs: number;
  call: CallOptions | undefined;
}

export class ModelServerClient {
  /** Management base URL (no credentials), used in error messages and as the identity of the replica. */
  readonly endpoint: string;
  readonly pluginPath: string;
  private readonly origin: string;
  private readonly basePath: string;
  private readonly token: TokenSource | undefined;
  private readonly dispatcher: Dispatcher;
  private readonly timeoutMs: number;
  private readonly registerTimeoutMs: number;
  private readonly maxResponseBytes: number;
  private readonly tokenContext: TokenContext;

  constructor(opts: ModelServerClientOptions) {
    const url = new URL(String(opts.baseURL));
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`model server URL must be http(s): ${url.protocol}`);
    }
    url.username = '';
    url.password = '';
    this.origin = url.origin;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.endpoint = this.origin + this.basePath;
    const pluginPath = (opts.pluginPath ?? DEFAULT_PLUGIN_PATH).replace(/^\/+|\/+$/g, '');
    if (!/^[A-Za-z0-9_-]+$/.test(pluginPath)) {
      throw new TypeError(`pluginPath must be one path segment: ${pluginPath}`);
    }
    this.pluginPath = pluginPath;
    this.token = typeof opts.token === 'string' ? staticToken(opts.token) : opts.token;
    this.dispatcher = opts.dispatcher ?? sharedModelServerAgent();
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.registerTimeoutMs = opts.registerTimeoutMs ?? 30 * 60_000;
    this.maxResponseBytes = opts.maxResponseBytes ?? 16 * 1024 * 1024;
    this.tokenContext = { rotateManagementKey: (apiKey) => this.rotateManagementKey(apiKey) };
  }

  /**
   * Downloads and registers a model through the endpoint plugin: `POST /{pluginPath}/models?file_name=...`.
   * Succeeds only on the registration message (or 202/206 when initial workers were asked for); a 200 whose body
   * is anything else (the third-party plugin's way of failing) is an error.
   */
  async register(req: RegisterRequest, call?: CallOptions): Promise<RegisterResult> {
    if (req.fileName === '') throw new TypeError('fileName is required');
    const operation = `register ${req.modelName ?? req.fileName}`;
    const res = await this.exchange({
      operation,
      method: 'POST',
      path: `/${this.pluginPath}/models`,
      query: {
        file_name: req.fileName,
        model_name: req.modelName,
        runtime: req.runtime,
        handler: req.handler,
        batch_size: req.batchSize,
        max_batch_delay: req.maxBatchDelay,
        response_timeout: req.responseTimeout,
        startup_timeout: req.startupTimeout,
        initial_workers: req.initialWorkers,
        synchronous: req.synchronous,
      },
      timeoutMs: call?.timeoutMs ?? this.registerTimeoutMs,
      call,
    });
    if (res.status >= 300) throw this.errorFrom(operation, res);

    const body = extractPluginStatus(res.body);
    const extra = {
      ...(body.taskID !== undefined ? { taskID: body.taskID } : {}),
      ...(body.cacheHit !== undefined ? { cacheHit: body.cacheHit } : {}),
    };
    const status = body.status;
    if (res.status === 202 && body.type === DOWNLOAD_IN_PROGRESS) {
      return {
        httpStatus: 202,
        status: status ?? 'download in progress',
        workersPending: false,
        inProgress: true,
      };
    }
    if (status !== undefined) {
      const reg = parseRegisteredMessage(status);
      if (reg && (res.status === 200 || res.status === 201)) {
        return { httpStatus: res.status, status, ...reg, workersPending: false, ...extra };
      }
      // initial_workers > 0: TorchServe answers like the scale call (202 async, 206 sync not finished).
      if (res.status === 202 || res.status === 206) {
        return {
          httpStatus: res.status,
          status,
          modelName: reg?.modelName ?? req.modelName,
          version: reg?.version,
          initialWorkers: reg?.initialWorkers ?? req.initialWorkers,
          workersPending: true,
          ...extra,
        };
      }
    }
    throw this.pluginFailure(operation, res, status, body.validJSON);
  }

  /** `GET /models/{name}[/{version}|/all]`: always an array. 404 → notFound error. */
  async describe(name: string, version?: string, call?: CallOptions): Promise<ModelDescription[]> {
    const operation = `describe ${name}${version !== undefined ? `/${version}` : ''}`;
    const res = await this.exchange({
      operation,
      method: 'GET',
      path: modelPath(name, version),
      timeoutMs: call?.timeoutMs ?? this.timeoutMs,
      call,
    });
    if (res.status !== 200) throw this.errorFrom(operation, res);
    return this.parse(operation, res, DescribeBody);
  }

  /** Like {@link describe}, but an absent model (404) is `null` instead of an error. */
  async describeIfPresent(
    name: string,
    version?: string,
    call?: CallOptions,
  ): Promise<ModelDescription[] | null> {
    try {
      return await this.describe(name, version, call);
    } catch (e) {
      if (isModelServerError(e) && e.kind === 'notFound') return null;
      throw e;
    }
  }

  /** One page of `GET /models` (default versions only). */
  async listModelsPage(
    page: { limit?: number; nextPageToken?: string } = {},
    call?: CallOptions,
  ): Promise<ModelListPage> {
    const operation = 'list models';
    const res = await this.exchange({
      operation,
      method: 'GET',
      path: '/models',
      query: { limit: page.limit, next_page_token: page.nextPageToken },
      timeoutMs: call?.timeoutMs ?? this.timeoutMs,
      call,
    });
    if (res.status !== 200) throw this.errorFrom(operation, res);
    const body = this.parse(operation, res, ListBody);
    return { models: body.models, nextPageToken: body.nextPageToken };
  }

  /** Every model (default versions), following `nextPageToken` until the last page. */
  async listModels(call?: CallOptions): Promise<ModelSummary[]> {
    const out: ModelSummary[] = [];
    const seen = new Set<string>();
    let token: string | undefined;
    for (;;) {
      const page = await this.listModelsPage(
        { limit: 100, ...(token !== undefined ? { nextPageToken: token } : {}) },
        call,
      );
      out.push(...page.models);
      // TorchServe sets nextPageToken also when the page ends exactly at the last model; the next page is then
      // empty. A repeated token would loop forever: stop.
      if (page.nextPageToken === undefined || page.models.length === 0 || seen.has(page.nextPageToken)) break;
      seen.add(page.nextPageToken);
      token = page.nextPageToken;
    }
    return out;
  }

  /** `PUT /models/{name}[/{version}]?min_worker=&max_worker=&synchronous=`: 202, or 200/206 when synchronous. */
  async scale(
    name: string,
    version: string | undefined,
    req: ScaleRequest,
    call?: CallOptions,
  ): Promise<ScaleResult> {
    const operation = `scale ${name}${version !== undefined ? `/${version}` : ''}`;
    for (const [k, v] of [
      ['minWorker', req.minWorker],
      ['maxWorker', req.maxWorker],
    ] as const) {
      if (v !== undefined && (!Number.isInteger(v) || v < 0)) {
        throw new TypeError(`${k} must be a non-negative integer`);
      }
    }
    const res = await this.exchange({
      operation,
      method: 'PUT',
      path: modelPath(name, version),
      query: { min_worker: req.minWorker, max_worker: req.maxWorker, synchronous: req.synchronous },
      timeoutMs: call?.timeoutMs ?? this.timeoutMs,
      call,
    });
    const state =
      res.status === 202
        ? 'accepted'
        : res.status === 200
          ? 'scaled'
          : res.status === 206
            ? 'inProgress'
            : undefined;
    if (state === undefined) throw this.errorFrom(operation, res);
    return { httpStatus: res.status, status: this.parse(operation, res, StatusBody).status, state };
  }

  /** `PUT /models/{name}/{version}/set-default`. */
  async setDefault(name: string, version: string, call?: CallOptions): Promise<StatusResult> {
    const operation = `set default ${name}/${version}`;
    const res = await this.exchange({
      operation,
      method: 'PUT',
      path: `${modelPath(name, version)}/set-default`,
      timeoutMs: call?.timeoutMs ?? this.timeoutMs,
      call,
    });
    if (res.status !== 200) throw this.errorFrom(operation, res);
    return { httpStatus: res.status, status: this.parse(operation, res, StatusBody).status };
  }

  /**
   * `DELETE /models/{name}[/{version}]`. Without a version the default version is removed; removing a default
   * version while other versions exist is refused (403 → terminal).
   */
  async unregister(name: string, version?: string, call?: CallOptions): Promise<StatusResult> {
    const operation = `unregister ${name}${version !== undefined ? `/${version}` : ''}`;
    const res = await this.exchange({
      operation,
      method: 'DELETE',
      path: modelPath(name, version),
      timeoutMs: call?.timeoutMs ?? this.timeoutMs,
      call,
    });
    if (res.status !== 200) throw this.errorFrom(operation, res);
    return { httpStatus: res.status, status: this.parse(operation, res, StatusBody).status };
  }

  // -------------------------------------------------------------------------------------------------------------

  /** `GET /token?type=management` with the API key: the server rotates the key and rewrites its key file. */
  private async rotateManagementKey(apiKey: string): Promise<void> {
    const operation = 'renew management key';
    const res = await this.send(
      {
        operation,
        method: 'GET',
        path: '/token',
        query: { type: 'management' },
        timeoutMs: this.timeoutMs,
        call: undefined,
      },
      apiKey,
    );
    if (res.status === 200) return;
    const err = this.errorFrom(operation, res);
    if (err.kind === 'auth') {
      throw new ModelServerError({
        kind: 'auth',
        status: err.status,
        serverType: err.serverType,
        serverMessage: `the API key of the key file was rejected: ${err.serverMessage}`,
        operation,
        endpoint: this.endpoint,
      });
    }
    throw err;
  }

  /** A request with the management key; on InvalidKeyException renews the key once and retries once. */
  private async exchange(x: Exchange): Promise<RawResponse> {
    if (!this.token) return this.send(x, undefined);
    const key = await this.tokenCall(x.operation, () => this.token!.get(this.tokenContext));
    const res = await this.send(x, key);
    if (!isInvalidKey(res)) return res;
    const rejected = this.errorFrom(x.operation, res);
    const renewed = await this.tokenCall(
      x.operation,
      () => this.token!.renew(key, this.tokenContext),
      rejected,
    );
    return this.send(x, renewed);
  }

  /**
   * Runs a token-source step; its failures become auth errors. After a rejection (`rejected`) the error keeps the
   * server's status, type and message and says why no other key could be obtained.
   */
  private async tokenCall<T>(
    operation: string,
    f: () => Promise<T>,
    rejected?: ModelServerError,
  ): Promise<T> {
    try {
      return await f();
    } catch (e) {
      if (isModelServerError(e)) throw e;
      const reason =
        e instanceof TokenUnavailableError ? e.message : 'the management token could not be read';
      throw new ModelServerError({
        kind: 'auth',
        status: rejected?.status ?? 0,
        serverType: rejected?.serverType,
        serverMessage: boundMessage(
          rejected ? `${rejected.serverMessage} (no other key: ${reason})` : reason,
          this.secrets(),
        ),
        operation,
        endpoint: this.endpoint,
        code: 'TOKEN_UNAVAILABLE',
        cause: e,
      });
    }
  }

  private async send(x: Exchange, key: string | undefined): Promise<RawResponse> {
    const timeout = AbortSignal.timeout(x.timeoutMs);
    const signal = x.call?.signal ? AbortSignal.any([x.call.signal, timeout]) : timeout;
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': USER_AGENT };
    if (key !== undefined) headers['authorization'] = `Bearer ${key}`;
    try {
      const res = await this.dispatcher.request({
        origin: this.origin,
        path: this.basePath + x.path + queryString(x.query),
        method: x.method,
        headers,
        signal,
        headersTimeout: x.timeoutMs,
        bodyTimeout: x.timeoutMs,
      });
      const body = await readBody(res.body, this.maxResponseBytes);
      return { status: res.statusCode, headers: res.headers, body };
    } catch (e) {
      if (x.call?.signal?.aborted) throw x.call.signal.reason ?? e;
      const code = timeout.aborted ? 'TIMEOUT' : networkCode(e);
      const what =
        code === 'TIMEOUT'
          ? `no complete answer within ${x.timeoutMs} ms`
          : code === 'RESPONSE_TOO_LARGE'
            ? `response larger than ${this.maxResponseBytes} bytes`
            : `request failed: ${e instanceof Error ? e.message : String(e)}`;
      throw new ModelServerError({
        kind: code === 'RESPONSE_TOO_LARGE' ? 'terminal' : 'retryable',
        status: 0,
        serverMessage: boundMessage(what, this.secrets()),
        operation: x.operation,
        endpoint: this.endpoint,
        code,
        cause: e,
      });
    }
  }

  private parse<T extends z.ZodType>(operation: string, res: RawResponse, schema: T): z.infer<T> {
    let raw: unknown;
    try {
      raw = JSON.parse(res.body);
    } catch {
      throw this.invalidResponse(operation, res, 'body is not JSON');
    }
    const parsed = schema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'schema mismatch';
      throw this.invalidResponse(operation, res, `unexpected body (${where})`);
    }
    return parsed.data;
  }

  private invalidResponse(operation: string, res: RawResponse, what: string): ModelServerError {
    return new ModelServerError({
      kind: 'terminal',
      status: res.status,
      serverMessage: boundMessage(`${what}: ${res.body.slice(0, 200)}`, this.secrets()),
      operation,
      endpoint: this.endpoint,
      code: 'INVALID_RESPONSE',
    });
  }

  /** An error out of a >= 300 answer: TorchServe's `{"code","type","message"}`, a plugin's `{"Status"}` or text. */
  private errorFrom(operation: string, res: RawResponse): ModelServerError {
    const { type, message } = errorFields(res.body);
    return new ModelServerError({
      kind: kindForStatus(res.status, type),
      status: res.status,
      serverType: type,
      serverMessage: boundMessage(message || `HTTP ${res.status} without a message`, this.secrets()),
      operation,
      endpoint: this.endpoint,
    });
  }

  /**
   * A 2xx register answer that is not the registration message: the third-party plugin reports every failure
   * this way (HTTP 200, `{"Status": "<exception message>"}`, possibly invalid JSON). Its message is the only
   * clue: a duplicate is a conflict; anything else (mostly download failures) is retryable.
   */
  private pluginFailure(
    operation: string,
    res: RawResponse,
    status: string | undefined,
    validJSON: boolean,
  ): ModelServerError {
    if (status === undefined) {
      return this.invalidResponse(
        operation,
        res,
        validJSON ? 'answer without a Status field' : 'answer is neither JSON nor the plugin Status format',
      );
    }
    let kind: ModelServerErrorKind = 'retryable';
    let type: string | undefined;
    if (/is already registered for model/.test(status)) {
      kind = 'conflict';
      type = 'ConflictStatusException';
    } else if (/^Model not found\b|does not exist for model/.test(status)) {
      kind = 'notFound';
    }
    return new ModelServerError({
      kind,
      status: res.status,
      serverType: type,
      serverMessage: boundMessage(status, this.secrets()),
      operation,
      endpoint: this.endpoint,
      code: 'PLUGIN_FAILURE',
    });
  }

  private secrets(): readonly string[] {
    return this.token?.secrets() ?? [];
  }
}

function isInvalidKey(res: RawResponse): boolean {
  return res.status === 400 && errorFields(res.body).type === INVALID_KEY_EXCEPTION;
}

function errorFields(body: string): { type?: string; message: string } {
  try {
    const parsed = ErrorBody.safeParse(JSON.parse(body));
    if (parsed.success) {
      const d = parsed.data;
      return {
        ...(d.type !== undefined ? { type: d.type } : {}),
        message: d.message ?? d.Status ?? d.status ?? body.trim(),
      };
    }
  } catch {
    const legacy = extractPluginStatus(body);
    if (legacy.status !== undefined) return { message: legacy.status };
  }
  return { message: body.trim() };
}

function modelPath(name: string, version?: string): string {
  if (name === '') throw new TypeError('model name is required');
  const base = `/models/${encodeURIComponent(name)}`;
  return version === undefined ? base : `${base}/${encodeURIComponent(version)}`;
}

function queryString(q: Exchange['query']): string {
  if (!q) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v !== undefined) params.append(k, String(v));
  }
  const s = params.toString();
  return s === '' ? '' : `?${s}`;
}

async function readBody(body: Dispatcher.ResponseData['body'], max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    size += buf.length;
    if (size > max) {
      body.destroy();
      throw Object.assign(new Error('response too large'), { code: 'RESPONSE_TOO_LARGE' });
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks).toString('utf8');
}
