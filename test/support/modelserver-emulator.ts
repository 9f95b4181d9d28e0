/**
 * Model-server emulator: TorchServe 0.12's management API as described by shared/contracts/model-server.md (and
 * read from its source: ManagementRequestHandler, ApiUtils, TokenAuthorizationHandler, HttpRequestHandler), plus
 * the two endpoint plugins: `p2p` (peerload's, valid JSON, meaningful statuses) and `dragonfly` (the third-party
 * one: HTTP 200 on every failure, body formatted by hand and invalid JSON whenever the message holds quotes).
 *
 * Light on purpose: one `node:http` server per instance and in-memory state, so one process runs 100+ instances
 * (see {@link startModelServerFleet}). Each instance has its own port and base URL, like one pod each.
 *
 * What is emulated, per instance:
 * - register through a plugin (`POST /{p2p|dragonfly}/models?file_name=`): a real HTTP GET of
 *   `objectURL(fileName)`, through the peer proxy at `proxyURL` when given (absolute-form request line, both filter
 *   headers, optional tag/application), then registration with 0 workers (seed 2.4 message), 409 on duplicates;
 * - `POST /models?url=` (model API), describe (always an array; workers UNLOADING, READY after `workerStartMs`),
 *   list with TorchServe's paging (including its `nextPageToken` on an exactly full last page), scale (202 with the
 *   seed 4.4 headers; 200/206 when synchronous), set-default, unregister (403 for a default version while others
 *   exist); model API gate (`enableModelApi`: POST /models and DELETE answer 405 when off — as in 0.12's source);
 * - token authorization with key expiry and `GET /token?type=management` rotation (empty 200 body; the new key is
 *   only in the key file, see {@link ModelServerEmulator.keyFile}), 400 InvalidKeyException otherwise; like
 *   TorchServe, any request whose URI contains `/token` is treated as a token request;
 * - error bodies `{"code","type","message"}` with `Connection: close` for >= 400;
 * - registration latency, failure injection (down / HTTP errors / slow), `wipe()` (a restarted process), counters.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import {
  Agent as HttpAgent,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  createServer,
  request,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { DEFAULT_FILTERS } from '../../src/storage/objecturl.ts';

// ---------------------------------------------------------------------------------------------------------------
// Options and public shape

export interface ModelServerEmulatorAuth {
  managementKey?: string;
  inferenceKey?: string;
  apiKey?: string;
  /** Lifetime of management/inference keys (`token_expiration_min`). Default 60 minutes. */
  expiryMs?: number;
}

export type FailureInjection =
  /** Connection refused: the server stops listening until the failure is cleared. */
  | { mode: 'down' }
  /** Answer `status` (default 500) with a TorchServe error body, `times` times (default: until cleared). */
  | { mode: 'error'; status?: number; type?: string; message?: string; routes?: string[]; times?: number }
  /** Delay answers by `delayMs`. */
  | { mode: 'slow'; delayMs: number; routes?: string[]; times?: number };

export interface ModelServerEmulatorOptions {
  /** Version of registered models (the archive's). Default "1.0". */
  modelVersion?: string | ((fileName: string) => string);
  /** Model name when the request has no model_name (the archive's). Default: file name without `.mar`. */
  modelName?: (fileName: string) => string;
  /** Added to every registration (after the download). Benchmarks use 200 ms. Default 0. */
  registrationLatencyMs?: number;
  /** Time a worker shows UNLOADING before READY. Default 50 ms. */
  workerStartMs?: number;
  /** Longest wait of a synchronous scale before it answers 206. Default 10 s. */
  syncScaleWaitMs?: number;
  /** Installed plugins (first path segment). Default both `p2p` and `dragonfly`. */
  plugins?: Array<'p2p' | 'dragonfly'>;
  /** `enable_model_api`: gates `POST /models` and `DELETE /models/...` (405 when off). Default true. */
  enableModelApi?: boolean;
  /** The dragonfly plugin calls the 11-parameter handleRegister: on 0.12 that is a NoSuchMethodError (500). */
  legacyPluginSignatureMismatch?: boolean;
  /** Peer proxy for plugin downloads (`http://127.0.0.1:port`). Absent: direct GET. */
  proxyURL?: string;
  /** URL of an object key. Absent: the download is skipped (registration only). */
  objectURL?: (fileName: string) => string;
  /** Query parameters filtered from the task id; sent in both filter headers. Default: the plugin's s3 default (src/storage/objecturl.ts). */
  filter?: string[];
  /** Extra headers of plugin downloads (seed 2.2 `header`). */
  headers?: Record<string, string>;
  tag?: string;
  application?: string;
  /** Token authorization: on (`true` or keys), off by default (`--disable-token-auth`). */
  auth?: boolean | ModelServerEmulatorAuth;
  /** Also write key_file.json here (mode 600) whenever it changes, like TorchServe in its working directory. */
  keyFilePath?: string;
  /** Port to listen on (127.0.0.1). Default: any free port. */
  port?: number;
  now?: () => number;
}

export interface ModelServerEmulatorStats {
  /** Requests by route, e.g. `POST /{plugin}/models`, `GET /models/{name}`, `PUT /models/{name}`. */
  requests: Record<string, number>;
  totalRequests: number;
  registrationAttempts: number;
  registrations: number;
  conflicts: number;
  scales: number;
  setDefaults: number;
  unregistrations: number;
  tokenRotations: number;
  authFailures: number;
  downloads: number;
  downloadBytes: number;
  injectedFailures: number;
  /** p2p plugin: POSTs answered 202 DownloadInProgress (their key was downloading for an earlier request). */
  inProgressAnswers: number;
  /** p2p plugin: POSTs that started a download + registration (the others were refused or shared one). */
  pluginRegistrationsStarted: number;
}

export interface DownloadRecord {
  url: string;
  viaProxy: boolean;
  status: number;
  bytes: number;
  taskID?: string | undefined;
  cacheHit: boolean;
}

export interface EmulatedWorker {
  id: string;
  startTime: string;
  readyAt: number;
  pid: number;
}

export interface EmulatedModel {
  modelName: string;
  modelVersion: string;
  modelUrl: string;
  runtime: string;
  handler?: string | undefined;
  batchSize: number;
  maxBatchDelay: number;
  responseTimeout: number;
  startupTimeout: number;
  minWorkers: number;
  maxWorkers: number;
  workers: EmulatedWorker[];
  registeredAt: number;
}

export interface ModelServerEmulator {
  /** Management base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  readonly port: number;
  readonly stats: ModelServerEmulatorStats;
  readonly downloads: DownloadRecord[];
  /** key_file.json as TorchServe writes it (pretty JSON); undefined when token auth is off. */
  keyFile(): string | undefined;
  /** Current keys; undefined when token auth is off. */
  keys(): { management: string; inference: string; api: string } | undefined;
  /** Makes the management key expire now (the server rejects it until rotated). */
  expireManagementKey(): void;
  /** Versions of a model (copies), default first; empty when absent. */
  model(name: string): EmulatedModel[];
  defaultVersion(name: string): string | undefined;
  /** Names of all registered models. */
  modelNames(): string[];
  /** Sets or clears (undefined) the injected failure. */
  inject(failure: FailureInjection | undefined): Promise<void>;
  /** A restarted process: every model gone; new keys when `rotateKeys` (as a real restart would). */
  wipe(opts?: { rotateKeys?: boolean }): void;
  resetStats(): void;
  close(): Promise<void>;
}

export interface ModelServerFleet {
  readonly instances: ModelServerEmulator[];
  readonly urls: string[];
  /** Sum of every instance's counters. */
  stats(): ModelServerEmulatorStats;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------------------------
// Constants (TorchServe's texts)

const TOKEN_AUTHORIZATION_FAILED =
  'Token Authorization failed. Token either incorrect, expired, or not provided correctly';
const TOKEN_AUTHENTICATION_FAILED =
  'Token Authentication failed. Token either incorrect, expired, or not provided correctly';
const NOT_FOUND_MESSAGE = 'Requested resource is not found, please refer to API document.';
const METHOD_NOT_ALLOWED_MESSAGE = 'Requested method is not allowed, please refer to API document.';
/** NettyUtils' no-cache headers (seed 4.4). */
const NO_CACHE_HEADERS = {
  Pragma: 'no-cache',
  'Cache-Control': 'no-cache; no-store, must-revalidate, private',
  Expires: 'Thu, 01 Jan 1970 00:00:00 UTC',
};

const downloadAgent = new HttpAgent({ keepAlive: true, maxSockets: 16 });

class HttpError extends Error {
  readonly status: number;
  readonly type: string;
  constructor(status: number, type: string, message: string) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

const notFound = (msg: string) => new HttpError(404, 'ModelNotFoundException', msg);
const versionNotFound = (name: string, version: string) =>
  new HttpError(
    404,
    'ModelVersionNotFoundException',
    `Model version: ${version} does not exist for model: ${name}`,
  );
const badRequest = (msg: string) => new HttpError(400, 'BadRequestException', msg);
const methodNotAllowed = () => new HttpError(405, 'MethodNotAllowedException', METHOD_NOT_ALLOWED_MESSAGE);

function errorTypeFor(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequestException';
    case 404:
      return 'ResourceNotFoundException';
    case 408:
      return 'RequestTimeoutException';
    case 409:
      return 'ConflictStatusException';
    case 503:
      return 'ServiceUnavailableException';
    case 507:
      return 'OutOfMemoryError';
    default:
      return 'InternalServerException';
  }
}

/** Java's Instant.toString() with microseconds, as TorchServe writes expiration times. */
function javaInstant(ms: number): string {
  const micros = String(Math.floor(Math.random() * 1000)).padStart(3, '0');
  return new Date(ms).toISOString().replace('Z', `${micros}Z`);
}

const newKey = () => randomBytes(6).toString('base64url');
const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

function emptyStats(): ModelServerEmulatorStats {
  return {
    requests: {},
    totalRequests: 0,
    registrationAttempts: 0,
    registrations: 0,
    conflicts: 0,
    scales: 0,
    setDefaults: 0,
    unregistrations: 0,
    tokenRotations: 0,
    authFailures: 0,
    downloads: 0,
    downloadBytes: 0,
    injectedFailures: 0,
    inProgressAnswers: 0,
    pluginRegistrationsStarted: 0,
  };
}

function defaultModelName(fileName: string): string {
  const last = fileName.split('/').pop() ?? fileName;
  return last.replace(/\.(mar|tar\.gz|tgz|zip)$/, '');
}

// ---------------------------------------------------------------------------------------------------------------
// Instance

interface Registration {
  fileName: string;
  modelName?: string | undefined;
  runtime?: string | undefined;
  handler?: string | undefined;
  batchSize?: number | undefined;
  maxBatchDelay?: number | undefined;
  responseTimeout?: number | undefined;
  startupTimeout?: number | undefined;
  initialWorkers: number;
  synchronous: boolean;
}

interface Reply {
  status: number;
  /** Serialized as pretty JSON unless `raw` is given. */
  json?: unknown;
  raw?: string;
  contentType?: string | null;
  headers?: Record<string, string>;
}

class Emulator implements ModelServerEmulator {
  url = '';
  port = 0;
  stats = emptyStats();
  downloads: DownloadRecord[] = [];
  /** p2p plugin: object keys being downloaded + registered, and since when. */
  private readonly pluginInFlight = new Map<string, number>();

  private readonly opts: ModelServerEmulatorOptions;
  private readonly now: () => number;
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  /** name → version → model; `defaults` holds the default version of each name. */
  private models = new Map<string, Map<string, EmulatedModel>>();
  private defaults = new Map<string, string>();
  private failure: FailureInjection | undefined;
  private failureUses = 0;
  private listening = false;
  private nextWorkerId = 9000;
  private auth:
    | { management: string; inference: string; api: string; managementExp: number; inferenceExp: number }
    | undefined;

  constructor(opts: ModelServerEmulatorOptions) {
    this.opts = opts;
    this.now = opts.now ?? Date.now;
    if (opts.auth) this.initKeys(typeof opts.auth === 'object' ? opts.auth : {});
    this.server = createServer({ keepAliveTimeout: 5_000 }, (req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  async listen(port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(e);
      this.server.once('error', onError);
      this.server.listen(port, '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    this.port = (this.server.address() as AddressInfo).port;
    this.url = `http://127.0.0.1:${this.port}`;
    this.listening = true;
  }

  private async stopListening(): Promise<void> {
    if (!this.listening) return;
    this.listening = false;
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  // ---- public API ----

  keyFile(): string | undefined {
    if (!this.auth) return undefined;
    return JSON.stringify(
      {
        management: { key: this.auth.management, 'expiration time': javaInstant(this.auth.managementExp) },
        inference: { key: this.auth.inference, 'expiration time': javaInstant(this.auth.inferenceExp) },
        API: { key: this.auth.api },
      },
      null,
      2,
    );
  }

  keys(): { management: string; inference: string; api: string } | undefined {
    return this.auth
      ? { management: this.auth.management, inference: this.auth.inference, api: this.auth.api }
      : undefined;
  }

  expireManagementKey(): void {
    if (!this.auth) throw new Error('token authorization is off');
    this.auth.managementExp = this.now() - 1;
    this.writeKeyFile();
  }

  model(name: string): EmulatedModel[] {
    const versions = this.models.get(name);
    if (!versions) return [];
    const def = this.defaults.get(name);
    const list = [...versions.values()].map((m) => structuredClone(m));
    return list.sort((a, b) => Number(b.modelVersion === def) - Number(a.modelVersion === def));
  }

  defaultVersion(name: string): string | undefined {
    return this.defaults.get(name);
  }

  modelNames(): string[] {
    return [...this.models.keys()].sort();
  }

  async inject(failure: FailureInjection | undefined): Promise<void> {
    if (failure?.mode === 'down') {
      this.failure = failure;
      await this.stopListening();
      return;
    }
    if (!this.listening) await this.listen(this.port);
    this.failure = failure;
    this.failureUses = 0;
  }

  wipe(opts: { rotateKeys?: boolean } = {}): void {
    this.models = new Map();
    this.defaults = new Map();
    if (opts.rotateKeys && this.auth) this.initKeys({ expiryMs: this.expiryMs() });
  }

  resetStats(): void {
    this.stats = emptyStats();
    this.downloads = [];
  }

  async close(): Promise<void> {
    await this.stopListening();
  }

  // ---- keys ----

  private expiryMs(): number {
    return typeof this.opts.auth === 'object' && this.opts.auth.expiryMs !== undefined
      ? this.opts.auth.expiryMs
      : 60 * 60_000;
  }

  private initKeys(a: ModelServerEmulatorAuth): void {
    const exp = this.now() + (a.expiryMs ?? this.expiryMs());
    this.auth = {
      management: a.managementKey ?? newKey(),
      inference: a.inferenceKey ?? newKey(),
      api: a.apiKey ?? newKey(),
      managementExp: exp,
      inferenceExp: exp,
    };
    this.writeKeyFile();
  }

  private writeKeyFile(): void {
    const content = this.keyFile();
    if (this.opts.keyFilePath && content !== undefined) {
      writeFileSync(this.opts.keyFilePath, content, { mode: 0o600 });
    }
  }

  // ---- HTTP ----

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Drain any body (TorchServe reads the whole request before dispatching).
    req.resume();
    await new Promise<void>((r) => {
      if (req.readableEnded) r();
      else req.on('end', r).on('error', () => r());
    });
    const url = new URL(req.url ?? '/', 'http://emulator');
    const method = req.method ?? 'GET';
    const segments = url.pathname.split('/');
    const route = routeLabel(method, segments, this.opts.plugins ?? ['p2p', 'dragonfly']);
    this.stats.totalRequests++;
    this.stats.requests[route] = (this.stats.requests[route] ?? 0) + 1;

    let reply: Reply;
    try {
      const injected = await this.applyFailure(route);
      reply = injected ?? (await this.dispatch(req, method, url, segments));
    } catch (e) {
      const err = e instanceof HttpError ? e : new HttpError(500, 'InternalServerException', String(e));
      reply = { status: err.status, json: { code: err.status, type: err.type, message: err.message } };
    }
    this.send(res, reply);
  }

  private async applyFailure(route: string): Promise<Reply | undefined> {
    const f = this.failure;
    if (!f || f.mode === 'down') return undefined;
    if (f.routes && !f.routes.includes(route)) return undefined;
    if (f.times !== undefined && this.failureUses >= f.times) return undefined;
    this.failureUses++;
    this.stats.injectedFailures++;
    if (f.mode === 'slow') {
      await sleep(f.delayMs);
      return undefined;
    }
    const status = f.status ?? 500;
    return {
      status,
      json: {
        code: status,
        type: f.type ?? errorTypeFor(status),
        message: f.message ?? `Injected failure ${status}`,
      },
    };
  }

  private send(res: ServerResponse, reply: Reply): void {
    const body = reply.raw ?? JSON.stringify(reply.json ?? {}, null, 2) + '\n';
    res.sendDate = false;
    res.statusCode = reply.status;
    if (reply.contentType !== null) res.setHeader('content-type', reply.contentType ?? 'application/json');
    res.setHeader('x-request-id', randomUUID());
    for (const [k, v] of Object.entries(NO_CACHE_HEADERS)) res.setHeader(k, v);
    for (const [k, v] of Object.entries(reply.headers ?? {})) res.setHeader(k, v);
    res.setHeader('content-length', Buffer.byteLength(body));
    res.setHeader('connection', reply.status >= 400 ? 'close' : 'keep-alive');
    res.end(body);
  }

  private async dispatch(req: IncomingMessage, method: string, url: URL, segments: string[]): Promise<Reply> {
    // TokenAuthorizationHandler: `req.toString().contains("/token")` decides what a token request is.
    if (this.auth && (req.url ?? '').includes('/token')) return this.handleToken(req, url);
    if (this.auth) this.checkKey(req, 'management');

    const plugins = this.opts.plugins ?? ['p2p', 'dragonfly'];
    const first = segments[1] ?? '';
    if ((plugins as string[]).includes(first)) {
      if (method !== 'POST' || segments[2] !== 'models' || segments.length !== 3) throw methodNotAllowed();
      return first === 'dragonfly' ? this.handleLegacyPlugin(url) : this.handleP2PPlugin(url);
    }
    if (
      first !== 'models' ||
      segments.length > 5 ||
      (segments.length === 5 && segments[4] !== 'set-default')
    ) {
      throw new HttpError(404, 'ResourceNotFoundException', NOT_FOUND_MESSAGE);
    }
    const apiEnabled = this.opts.enableModelApi ?? true;
    if (segments.length < 3) {
      if (method === 'GET') return this.handleList(url);
      if (method === 'POST' && apiEnabled) return this.handleModelApiRegister(url);
      throw methodNotAllowed();
    }
    const name = decodeURIComponent(segments[2]!);
    const version = segments.length >= 4 ? decodeURIComponent(segments[3]!) : undefined;
    if (method === 'GET') return this.handleDescribe(name, version);
    if (method === 'PUT') {
      if (segments.length === 5) return this.handleSetDefault(name, version!);
      return this.handleScale(url, name, version ?? url.searchParams.get('model_version') ?? undefined);
    }
    if (method === 'DELETE' && apiEnabled) return this.handleUnregister(name, version);
    throw methodNotAllowed();
  }

  private checkKey(req: IncomingMessage, kind: 'management' | 'api'): void {
    const a = this.auth!;
    const header = req.headers['authorization'];
    const token = typeof header === 'string' ? header.replace(/^Bearer\s+/i, '').trim() : undefined;
    const ok = kind === 'api' ? token === a.api : token === a.management && this.now() < a.managementExp;
    if (!ok) {
      this.stats.authFailures++;
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHORIZATION_FAILED);
    }
  }

  private handleToken(req: IncomingMessage, url: URL): Reply {
    // Every failure in the token branch (wrong key, wrong type) becomes the "Authentication" variant.
    try {
      this.checkKey(req, 'api');
    } catch {
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHENTICATION_FAILED);
    }
    const type = url.searchParams.get('type');
    const a = this.auth!;
    if (type === 'management') {
      a.management = newKey();
      a.managementExp = this.now() + this.expiryMs();
    } else if (type === 'inference') {
      a.inference = newKey();
      a.inferenceExp = this.now() + this.expiryMs();
    } else {
      this.stats.authFailures++;
      throw new HttpError(400, 'InvalidKeyException', TOKEN_AUTHENTICATION_FAILED);
    }
    this.stats.tokenRotations++;
    this.writeKeyFile();
    // NettyUtils.sendJsonResponse(ctx, "") — the new key is NOT in the answer.
    return { status: 200, raw: '' };
  }

  // ---- registration ----

  private parseRegistration(url: URL, fileParam: 'file_name' | 'url'): Registration {
    const q = url.searchParams;
    const int = (name: string): number | undefined => {
      const v = q.get(name);
      if (v === null) return undefined;
      const n = Number(v);
      if (!Number.isInteger(n)) throw badRequest(`Invalid ${name}: ${v}`);
      return n;
    };
    const sync = q.get('synchronous');
    return {
      fileName: q.get(fileParam) ?? '',
      modelName: q.get('model_name') ?? undefined,
      runtime: q.get('runtime') ?? undefined,
      handler: q.get('handler') ?? undefined,
      batchSize: int('batch_size'),
      maxBatchDelay: int('max_batch_delay'),
      responseTimeout: int('response_timeout'),
      startupTimeout: int('startup_timeout'),
      initialWorkers: int('initial_workers') ?? 0,
      // RegisterModelRequest: synchronous defaults to true.
      synchronous: sync === null ? true : sync.toLowerCase() === 'true',
    };
  }

  /** ApiUtils.handleRegister: conflict check, insert (first version becomes default), initial workers. */
  private async register(r: Registration): Promise<{ status: number; message: string }> {
    await sleep(this.opts.registrationLatencyMs ?? 0);
    const fileName = r.fileName.split('/').pop() ?? r.fileName;
    const name = r.modelName ?? (this.opts.modelName ?? defaultModelName)(r.fileName);
    const v = this.opts.modelVersion;
    const version = typeof v === 'function' ? v(r.fileName) : (v ?? '1.0');
    let versions = this.models.get(name);
    if (versions?.has(version)) {
      this.stats.conflicts++;
      throw new HttpError(
        409,
        'ConflictStatusException',
        `Model version ${version} is already registered for model ${name}`,
      );
    }
    if (!versions) {
      versions = new Map();
      this.models.set(name, versions);
    }
    versions.set(version, {
      modelName: name,
      modelVersion: version,
      modelUrl: fileName,
      runtime: r.runtime ?? 'python',
      handler: r.handler,
      batchSize: r.batchSize ?? 1,
      maxBatchDelay: r.maxBatchDelay ?? 100,
      responseTimeout: r.responseTimeout ?? 120,
      startupTimeout: r.startupTimeout ?? 120,
      minWorkers: 0,
      maxWorkers: 0,
      workers: [],
      registeredAt: this.now(),
    });
    if (!this.defaults.has(name)) this.defaults.set(name, version);
    this.stats.registrations++;
    if (r.initialWorkers <= 0) {
      return {
        status: 200,
        message: `Model "${name}" Version: ${version} registered with 0 initial workers. Use scale workers API to add workers for the model.`,
      };
    }
    const scaled = await this.updateWorkers(name, version, r.initialWorkers, r.initialWorkers, r.synchronous);
    if (scaled.status === 200) {
      return {
        status: 200,
        message: `Model "${name}" Version: ${version} registered with ${r.initialWorkers} initial workers`,
      };
    }
    return scaled;
  }

  private async handleModelApiRegister(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const r = this.parseRegistration(url, 'url');
    if (r.fileName === '') throw badRequest('Parameter url is required.');
    const out = await this.register(r);
    return { status: out.status, json: { status: out.message } };
  }

  /** peerload's plugin: valid JSON always, `Status` + TorchServe's error fields, meaningful statuses. */
  private async handleP2PPlugin(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const fail = (
      status: number,
      type: string,
      message: string,
      headers?: Record<string, string>,
    ): Reply => ({
      status,
      json: { code: status, type, message, Status: message },
      ...(headers ? { headers } : {}),
    });
    if (url.searchParams.has('url')) {
      return fail(
        400,
        'BadRequestException',
        'Parameter url is not supported by this endpoint: use file_name.',
      );
    }
    const r = this.parseRegistration(url, 'file_name');
    if (r.fileName === '') return fail(400, 'BadRequestException', 'Parameter file_name is required.');
    if (r.fileName.startsWith('/') || `/${r.fileName}/`.includes('/../')) {
      return fail(400, 'BadRequestException', `Invalid file_name: ${r.fileName}`);
    }
    // As the plugin: one download per object key; a POST for a key in flight starts nothing and answers 202
    // DownloadInProgress (README). The download goes on when the client that started it goes away.
    const started = this.pluginInFlight.get(r.fileName);
    if (started !== undefined) {
      this.stats.inProgressAnswers++;
      const message = `Download of ${r.fileName} in progress since ${new Date(started).toISOString()}`;
      return { status: 202, json: { code: 202, type: 'DownloadInProgress', message, Status: message } };
    }
    this.stats.pluginRegistrationsStarted++;
    this.pluginInFlight.set(r.fileName, this.now());
    try {
      return await this.downloadAndRegister(r, fail);
    } finally {
      this.pluginInFlight.delete(r.fileName);
    }
  }

  private async downloadAndRegister(
    r: Registration,
    fail: (status: number, type: string, message: string, headers?: Record<string, string>) => Reply,
  ): Promise<Reply> {
    const dl = await this.download(r.fileName);
    if (dl && dl.status === 404)
      return fail(404, 'ModelNotFoundException', `Object not found: ${r.fileName}`);
    if (dl && dl.status !== 200) {
      return fail(
        502,
        'DownloadArchiveException',
        `Download of ${r.fileName} failed: ${dl.error ?? `HTTP ${dl.status}`}`,
        {
          'X-Dragonfly-Error-Type': dl.errorType ?? 'proxy',
        },
      );
    }
    try {
      const out = await this.register(r);
      return {
        status: out.status,
        json: {
          Status: out.message,
          // As the plugin: the daemon marks only a local hit, so CacheHit is never false (a remote hit and a miss
          // look the same) and LocalHit says what is known once the download went through P2P.
          ...(dl?.taskID !== undefined ? { TaskID: dl.taskID, LocalHit: dl.cacheHit } : {}),
          ...(dl?.cacheHit ? { CacheHit: true } : {}),
        },
      };
    } catch (e) {
      if (e instanceof HttpError) return fail(e.status, e.type, e.message);
      throw e;
    }
  }

  /**
   * dragonfly-endpoint (2023): `String.format("{\n\t\"Status\": \"%s\"\n}\n", message)` with the response left at
   * HTTP 200 and no content type on failures; on 0.12 its 11-parameter handleRegister call is a NoSuchMethodError.
   */
  private async handleLegacyPlugin(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const legacy = (status: number, message: string): Reply => ({
      status,
      raw: `{\n\t"Status": "${message}"\n}\n`,
      contentType: null,
    });
    const r = this.parseRegistration(url, 'file_name');
    if (r.fileName === '') return legacy(200, 'fileName is required.');
    const dl = await this.download(r.fileName);
    if (dl && dl.status !== 200) {
      return legacy(200, `Failed to download model file "${r.fileName}": ${dl.error ?? `HTTP ${dl.status}`}`);
    }
    if (this.opts.legacyPluginSignatureMismatch) {
      throw new HttpError(
        500,
        'NoSuchMethodError',
        "'org.pytorch.serve.http.StatusResponse org.pytorch.serve.util.ApiUtils.handleRegister(java.lang.String, java.lang.String, org.pytorch.serve.archive.model.Manifest$RuntimeType, java.lang.String, int, int, int, int, boolean, boolean, boolean)'",
      );
    }
    try {
      const out = await this.register(r);
      return legacy(out.status, out.message);
    } catch (e) {
      if (e instanceof HttpError) return legacy(200, e.message);
      throw e;
    }
  }

  /** GET through the peer proxy (or direct). Undefined when no objectURL is configured. */
  private async download(
    fileName: string,
  ): Promise<
    { status: number; taskID?: string; cacheHit: boolean; error?: string; errorType?: string } | undefined
  > {
    if (!this.opts.objectURL) return undefined;
    const target = new URL(this.opts.objectURL(fileName));
    const filter = this.opts.filter ?? [...DEFAULT_FILTERS.s3];
    // As the plugin: through P2P whatever the daemon's proxy.rules.
    const headers: Record<string, string> = { ...this.opts.headers, 'X-Dragonfly-Use-P2P': 'true' };
    if (filter.length > 0) {
      headers['X-Dragonfly-Filtered-Query-Params'] = filter.join(',');
      headers['X-Dragonfly-Filter'] = filter.join('&');
    }
    if (this.opts.tag) headers['X-Dragonfly-Tag'] = this.opts.tag;
    if (this.opts.application) headers['X-Dragonfly-Application'] = this.opts.application;
    const proxy = this.opts.proxyURL ? new URL(this.opts.proxyURL) : undefined;
    if (!proxy && target.protocol !== 'http:')
      throw new Error('the emulator downloads http URLs only (or via proxy)');
    headers['host'] = target.host;
    this.stats.downloads++;
    const record: DownloadRecord = {
      url: target.href,
      viaProxy: proxy !== undefined,
      status: 0,
      bytes: 0,
      cacheHit: false,
    };
    this.downloads.push(record);
    if (this.downloads.length > 1000) this.downloads.shift();
    return new Promise((resolve) => {
      const req = request(
        {
          agent: downloadAgent,
          host: proxy ? proxy.hostname : target.hostname,
          port: proxy ? proxy.port || 80 : target.port || 80,
          // Absolute-form request line for a forward proxy (RFC 9112 3.2.2).
          path: proxy ? target.href : target.pathname + target.search,
          method: 'GET',
          headers,
          timeout: 60_000,
        },
        (res) => {
          record.status = res.statusCode ?? 0;
          const taskID = res.headers['x-dragonfly-task-id'];
          record.taskID = typeof taskID === 'string' ? taskID : undefined;
          record.cacheHit = res.headers['x-dragonfly-task-download-finished'] === 'true';
          res.on('data', (c: Buffer) => {
            record.bytes += c.length;
            this.stats.downloadBytes += c.length;
          });
          res.on('end', () => {
            const errorType = res.headers['x-dragonfly-error-type'];
            resolve({
              status: record.status,
              ...(record.taskID !== undefined ? { taskID: record.taskID } : {}),
              cacheHit: record.cacheHit,
              ...(typeof errorType === 'string' ? { errorType } : {}),
            });
          });
          res.on('error', (e) =>
            resolve({ status: 0, cacheHit: false, error: e.message, errorType: 'proxy' }),
          );
        },
      );
      req.on('timeout', () => req.destroy(new Error('download timed out')));
      req.on('error', (e) => {
        record.status = 0;
        resolve({ status: 0, cacheHit: false, error: e.message, errorType: proxy ? 'proxy' : 'backend' });
      });
      req.end();
    });
  }

  // ---- management calls ----

  private handleList(url: URL): Reply {
    let limit = Number.parseInt(url.searchParams.get('limit') ?? '100', 10);
    let token = Number.parseInt(url.searchParams.get('next_page_token') ?? '0', 10);
    if (Number.isNaN(limit) || limit > 100 || limit < 0) limit = 100;
    if (Number.isNaN(token) || token < 0) token = 0;
    const names = [...this.defaults.keys()].sort();
    let last = token + limit;
    const body: { nextPageToken?: string; models: Array<{ modelName: string; modelUrl: string }> } = {
      models: [],
    };
    // ApiUtils.getModelList: the token is set whenever the page does not run past the end (also exactly at it).
    if (last > names.length) last = names.length;
    else body.nextPageToken = String(last);
    for (let i = token; i < last; i++) {
      const name = names[i]!;
      body.models.push({
        modelName: name,
        modelUrl: this.models.get(name)!.get(this.defaults.get(name)!)!.modelUrl,
      });
    }
    return {
      status: 200,
      json:
        body.nextPageToken !== undefined ? { nextPageToken: body.nextPageToken, models: body.models } : body,
    };
  }

  private handleDescribe(name: string, version: string | undefined): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    let list: EmulatedModel[];
    if (version === 'all') list = [...versions.values()];
    else {
      const m = versions.get(version ?? this.defaults.get(name)!);
      if (!m) throw notFound(`Model not found: ${name}`);
      list = [m];
    }
    return { status: 200, json: list.map((m) => this.describe(m)) };
  }

  private describe(m: EmulatedModel): Record<string, unknown> {
    const now = this.now();
    return {
      modelName: m.modelName,
      modelVersion: m.modelVersion,
      modelUrl: m.modelUrl,
      runtime: m.runtime,
      minWorkers: m.minWorkers,
      maxWorkers: m.maxWorkers,
      batchSize: m.batchSize,
      maxBatchDelay: m.maxBatchDelay,
      maxRetryTimeoutInSec: 300,
      clientTimeoutInMills: 0,
      parallelType: '',
      parallelLevel: 0,
      deviceType: 'cpu',
      continuousBatching: false,
      useJobTicket: false,
      useVenv: false,
      stateful: false,
      responseTimeout: m.responseTimeout,
      startupTimeout: m.startupTimeout,
      loadedAtStartup: false,
      workers: m.workers.map((w) => ({
        id: w.id,
        startTime: w.startTime,
        // A starting worker shows UNLOADING (WorkerThread state != WORKER_MODEL_LOADED).
        status: now >= w.readyAt ? 'READY' : 'UNLOADING',
        memoryUsage: now >= w.readyAt ? 52_000_000 : 0,
        pid: w.pid,
        gpu: false,
        gpuUsage: 'N/A',
      })),
      jobQueueStatus: { remainingCapacity: 1000, pendingRequests: 0 },
    };
  }

  private async handleScale(url: URL, name: string, version: string | undefined): Promise<Reply> {
    const q = url.searchParams;
    const intParam = (k: string, dflt: number): number => {
      const v = q.get(k);
      if (v === null) return dflt;
      const n = Number(v);
      if (!Number.isInteger(n)) throw badRequest(`Invalid ${k}: ${v}`);
      return n;
    };
    const min = intParam('min_worker', 1);
    const max = intParam('max_worker', min);
    const synchronous = (q.get('synchronous') ?? '').toLowerCase() === 'true';
    const out = await this.updateWorkers(name, version, min, max, synchronous);
    this.stats.scales++;
    return { status: out.status, json: { status: out.message } };
  }

  /** ApiUtils.updateModelWorkers. */
  private async updateWorkers(
    name: string,
    version: string | undefined,
    min: number,
    max: number,
    synchronous: boolean,
  ): Promise<{ status: number; message: string }> {
    if (max < min) throw badRequest('max_worker cannot be less than min_worker.');
    if (!this.defaults.has(name)) throw notFound(`Model not found: ${name}`);
    const m = this.models.get(name)!.get(version ?? this.defaults.get(name)!);
    if (!m) throw versionNotFound(name, version!);
    m.minWorkers = min;
    m.maxWorkers = max;
    const startMs = this.opts.workerStartMs ?? 50;
    while (m.workers.length > min) m.workers.pop();
    while (m.workers.length < min) {
      const now = this.now();
      m.workers.push({
        id: String(this.nextWorkerId++),
        startTime: new Date(now).toISOString(),
        readyAt: now + startMs,
        pid: 10_000 + Math.floor(Math.random() * 50_000),
      });
    }
    if (!synchronous) return { status: 202, message: 'Processing worker updates...' };
    const readyAt = Math.max(0, ...m.workers.map((w) => w.readyAt));
    const wait = readyAt - this.now();
    const cap = this.opts.syncScaleWaitMs ?? 10_000;
    await sleep(Math.min(Math.max(wait, 0), cap));
    if (wait > cap) return { status: 206, message: 'Workers scaling in progress...' };
    return {
      status: 200,
      message: `Workers scaled to ${min} for model: ${name}${version !== undefined ? `, version: ${version}` : ''}`,
    };
  }

  private handleSetDefault(name: string, version: string): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    if (!versions.has(version)) throw versionNotFound(name, version);
    this.defaults.set(name, version);
    this.stats.setDefaults++;
    return {
      status: 200,
      json: { status: `Default vesion succsesfully updated for model "${name}" to "${version}"` },
    };
  }

  private handleUnregister(name: string, version: string | undefined): Reply {
    const versions = this.models.get(name);
    if (!versions) throw notFound(`Model not found: ${name}`);
    const def = this.defaults.get(name)!;
    const v = version ?? def;
    if (!versions.has(v)) throw versionNotFound(name, v);
    if (v === def && versions.size > 1) {
      throw new HttpError(
        403,
        'InvalidModelVersionException',
        `Cannot remove default version for model ${name}`,
      );
    }
    versions.delete(v);
    if (versions.size === 0) {
      this.models.delete(name);
      this.defaults.delete(name);
    }
    this.stats.unregistrations++;
    return { status: 200, json: { status: `Model "${name}" unregistered` } };
  }
}

function routeLabel(method: string, segments: string[], plugins: string[]): string {
  const first = segments[1] ?? '';
  if (first === 'token') return `${method} /token`;
  if (plugins.includes(first)) return `${method} /{plugin}/models`;
  if (first !== 'models') return `${method} other`;
  if (segments.length < 3) return `${method} /models`;
  if (segments.length === 3) return `${method} /models/{name}`;
  if (segments.length === 4) return `${method} /models/{name}/{version}`;
  return `${method} /models/{name}/{version}/${segments[4]}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Entry points

/** Starts one emulated model server on 127.0.0.1. */
export async function startModelServerEmulator(
  opts: ModelServerEmulatorOptions = {},
): Promise<ModelServerEmulator> {
  const emu = new Emulator(opts);
  await emu.listen(opts.port ?? 0);
  return emu;
}

/** Starts `n` emulated model servers (each its own port) in this process. */
export async function startModelServerFleet(
  n: number,
  opts: ModelServerEmulatorOptions | ((index: number) => ModelServerEmulatorOptions) = {},
): Promise<ModelServerFleet> {
  const instances = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      startModelServerEmulator(typeof opts === 'function' ? opts(i) : opts),
    ),
  );
  return {
    instances,
    urls: instances.map((e) => e.url),
    stats() {
      const total = emptyStats();
      for (const e of instances) {
        for (const [k, v] of Object.entries(e.stats)) {
          if (k === 'requests') {
            for (const [route, count] of Object.entries(v as Record<string, number>)) {
              total.requests[route] = (total.requests[route] ?? 0) + count;
            }
          } else (total as unknown as Record<string, number>)[k]! += v as number;
        }
      }
      return total;
    },
    async close() {
      await Promise.all(instances.map((e) => e.close()));
    },
  };
}
