/**
 * The Kubernetes client of the runtime: a KubeConfig (in-cluster or from a file) and a small typed client for
 * list / watch / get / create / update / patch / delete and the `/status` subresource of any resource.
 *
 * Written over undici directly rather than the generated `@kubernetes/client-node` API classes because the
 * runtime needs, for every resource alike: one connection pool per process (client-node builds a new undici
 * Agent for each request it authenticates), streaming watches with our own time-outs, typed errors carrying
 * the HTTP status and `reason`, and one place that sees every request (metrics, and tests that count writes).
 * Authentication (tokens, exec/OIDC plugins, impersonation, client certificates) still comes from client-node.
 */
import { Agent, request, type Dispatcher } from 'undici';
import { createInterface } from 'node:readline';
import { readFileOrData, type KubeConfigLike } from './kubeconfig.ts';
import { timeoutSignal, timerDelay } from './timers.ts';
import { redactBounded } from '../redact.ts';

/** A group/version/resource plus what the runtime needs to address it. `group` is '' for the core group. */
export interface Gvr {
  group: string;
  version: string;
  /** Plural resource name, e.g. `endpointslices`. */
  resource: string;
  kind: string;
  namespaced: boolean;
}

/** The Kubernetes resources the runtime itself uses (and controllers may watch). A product's own resources are
 *  defined beside its API (e.g. a product's `src/api/resources.ts`), so the runtime knows no product. */
export const GVR = {
  endpointSlices: {
    group: 'discovery.k8s.io',
    version: 'v1',
    resource: 'endpointslices',
    kind: 'EndpointSlice',
    namespaced: true,
  },
  pods: { group: '', version: 'v1', resource: 'pods', kind: 'Pod', namespaced: true },
  secrets: { group: '', version: 'v1', resource: 'secrets', kind: 'Secret', namespaced: true },
  configMaps: { group: '', version: 'v1', resource: 'configmaps', kind: 'ConfigMap', namespaced: true },
  leases: {
    group: 'coordination.k8s.io',
    version: 'v1',
    resource: 'leases',
    kind: 'Lease',
    namespaced: true,
  },
  events: { group: 'events.k8s.io', version: 'v1', resource: 'events', kind: 'Event', namespaced: true },
} as const satisfies Record<string, Gvr>;

/** The part of every object the runtime relies on. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    generation?: number;
    resourceVersion?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    managedFields?: unknown;
    [k: string]: unknown;
  };
  [k: string]: unknown;
}

export interface KubeList<T> {
  metadata: { resourceVersion?: string; continue?: string };
  items: T[];
}

export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

/** The `Status` object the apiserver returns with errors. */
export interface KubeStatus {
  kind: 'Status';
  code?: number;
  reason?: string;
  message?: string;
}

/** An HTTP error from the apiserver (or a network error: `code` 0). */
export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  constructor(code: number, reason: string, message: string, cause?: unknown) {
    super(message, { cause });
    this.name = 'ApiError';
    this.code = code;
    this.reason = reason;
  }
}

export const isNotFound = (err: unknown): boolean => err instanceof ApiError && err.code === 404;
export const isConflict = (err: unknown): boolean => err instanceof ApiError && err.code === 409;
/** A create's 409: the name is taken (not a stale resourceVersion, also 409). */
export const isAlreadyExists = (err: unknown): boolean =>
  err instanceof ApiError && err.code === 409 && err.reason === 'AlreadyExists';

/** What every request reports to observers (metrics, tests). `status` is 0 when no response arrived. */
export interface RequestRecord {
  method: string;
  path: string;
  query: Record<string, string>;
  status: number;
  watch: boolean;
  durationMs: number;
  /** The apiserver's `Warning` headers (deprecations, Pod Security `warn` mode), when it sent any. */
  warnings?: string[];
}

const PATCH_TYPES = {
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  apply: 'application/apply-patch+yaml',
} as const;
export type PatchType = keyof typeof PATCH_TYPES;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** Whole-request time-out; default 30 s. */
  timeoutMs?: number;
}

/**
 * How a client names itself to the apiserver: `fieldManager` on its writes (in `managedFields` and audit logs) and
 * its `User-Agent`. The product passes its own; without them the apiserver's defaults apply, as with client-go.
 */
export interface KubeIdentity {
  fieldManager?: string | undefined;
  userAgent?: string | undefined;
}

const HEADER_TTL_MS = 10_000;
const WRITES = new Set(['POST', 'PUT', 'PATCH']);

export class KubeClient {
  readonly kubeConfig: KubeConfigLike;
  readonly server: string;
  /** Sent as `fieldManager` on every write that does not name one. */
  readonly fieldManager: string | undefined;
  private readonly userAgent: string | undefined;
  private readonly dispatcher: Dispatcher;
  private readonly observers = new Set<(r: RequestRecord) => void>();
  private headerCache: { at: number; headers: Record<string, string | string[]> } | undefined;
  private tls: {
    ca?: Buffer;
    cert?: Buffer;
    key?: Buffer;
    rejectUnauthorized?: boolean;
    servername?: string;
  };

  /** `kubeConfig`: from {@link loadKubeConfig}, or a client-node KubeConfig. */
  constructor(kubeConfig: KubeConfigLike, identity: KubeIdentity = {}) {
    this.kubeConfig = kubeConfig;
    this.fieldManager = identity.fieldManager;
    this.userAgent = identity.userAgent;
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = cluster.server.replace(/\/+$/, '');
    const opts: Record<string, unknown> = {};
    // Read TLS material synchronously once: applyToHTTPSOptions is async only for auth plugins.
    const ca = readFileOrData(cluster.caFile, cluster.caData);
    const user = kubeConfig.getCurrentUser();
    const cert = readFileOrData(user?.certFile, user?.certData);
    const key = readFileOrData(user?.keyFile, user?.keyData);
    if (ca) opts.ca = ca;
    if (cert) opts.cert = cert;
    if (key) opts.key = key;
    if (cluster.skipTLSVerify) opts.rejectUnauthorized = false;
    if (cluster.tlsServerName) opts.servername = cluster.tlsServerName;
    this.tls = opts;
    // One pool for the process; watches hold one connection each, so leave room for them.
    this.dispatcher = new Agent({
      connect: { ...this.tls, keepAlive: true, keepAliveInitialDelay: 30_000 },
      connections: 64,
      keepAliveTimeout: 30_000,
    });
  }

  /** Observes every request after it completed (or failed). Returns an unsubscribe function. */
  onRequest(fn: (r: RequestRecord) => void): () => void {
    this.observers.add(fn);
    return () => this.observers.delete(fn);
  }

  private async headers(): Promise<Record<string, string | string[]>> {
    const now = Date.now();
    if (this.headerCache && now - this.headerCache.at < HEADER_TTL_MS) return this.headerCache.headers;
    const opts: { headers?: Record<string, string> } = {};
    await this.kubeConfig.applyToHTTPSOptions(opts);
    const headers: Record<string, string | string[]> = {
      ...(this.userAgent ? { 'user-agent': this.userAgent } : {}),
      ...(opts.headers ?? {}),
    };
    const user = this.kubeConfig.getCurrentUser();
    if (user?.username) {
      headers.authorization = `Basic ${Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64')}`;
    }
    // client-node sends Impersonate-User only; groups matter for RBAC subjects of kind Group.
    if (user?.impersonateGroups?.length) headers['Impersonate-Group'] = user.impersonateGroups;
    this.headerCache = { at: now, headers };
    return headers;
  }

  private notify(r: RequestRecord): void {
    for (const fn of this.observers) {
      try {
        fn(r);
      } catch {
        // observers must not break requests
      }
    }
  }

  /** One request; JSON in and out. Throws {@link ApiError} on non-2xx and on network errors (code 0). */
  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const query = cleanQuery(opts.query);
    // Every write names its manager (create, update, patch; DELETE takes no fieldManager); without one the
    // apiserver derives it from the User-Agent.
    if (WRITES.has(method) && query.fieldManager === undefined && this.fieldManager !== undefined)
      query.fieldManager = this.fieldManager;
    const started = performance.now();
    let status = 0;
    let warnings: string[] | undefined;
    const timeout = timeoutSignal(opts.timeoutMs ?? 30_000);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    try {
      const headers: Record<string, string | string[]> = {
        ...(await this.headers()),
        accept: 'application/json',
      };
      let body: string | undefined;
      if (opts.body !== undefined) {
        body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
        headers['content-type'] = opts.contentType ?? 'application/json';
      }
      const res = await request(this.server + path, {
        method: method as Dispatcher.HttpMethod,
        query,
        headers,
        body,
        dispatcher: this.dispatcher,
        signal,
      });
      status = res.statusCode;
      if (res.headers.warning !== undefined) warnings = warningTexts(res.headers.warning);
      const text = await res.body.text();
      if (status < 200 || status >= 300) throw apiErrorFrom(status, text, method, path);
      return (text ? JSON.parse(text) : undefined) as T;
    } catch (err) {
      if (err instanceof ApiError) throw err;
      const what = timeout.aborted ? 'timed out' : ((err as Error).message ?? String(err));
      throw new ApiError(0, 'NetworkError', `${method} ${path}: ${what}`, err);
    } finally {
      this.notify({
        method,
        path,
        query,
        status,
        watch: false,
        durationMs: performance.now() - started,
        ...(warnings ? { warnings } : {}),
      });
    }
  }

  /**
   * Opens a watch and calls `onEvent` for each event until the server closes the stream (resolves), the
   * signal aborts (resolves), or an error happens (rejects with ApiError). `idleTimeoutMs` guards against
   * half-open connections: the stream is dropped when nothing (not even a bookmark) arrives for that long.
   */
  async watch<T>(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (ev: WatchEvent<T>) => void,
    opts: { signal?: AbortSignal; idleTimeoutMs?: number } = {},
  ): Promise<void> {
    const q = cleanQuery({ ...query, watch: 'true' });
    const started = performance.now();
    let status = 0;
    try {
      const res = await request(this.server + path, {
        method: 'GET',
        query: q,
        headers: { ...(await this.headers()), accept: 'application/json' },
        dispatcher: this.dispatcher,
        signal: opts.signal ?? null,
        headersTimeout: 30_000,
        bodyTimeout: opts.idleTimeoutMs ?? 0,
      });
      status = res.statusCode;
      if (status !== 200) throw apiErrorFrom(status, await res.body.text(), 'WATCH', path);
      const lines = createInterface({ input: res.body, crlfDelay: Infinity });
      try {
        for await (const line of lines) {
          if (!line) continue;
          let ev: WatchEvent<T>;
          try {
            ev = JSON.parse(line) as WatchEvent<T>;
          } catch {
            throw new ApiError(0, 'BadWatchEvent', `WATCH ${path}: malformed event`);
          }
          onEvent(ev);
        }
      } finally {
        lines.close();
        res.body.destroy();
      }
    } catch (err) {
      if (opts.signal?.aborted) return;
      if (err instanceof ApiError) throw err;
      throw new ApiError(0, 'NetworkError', `WATCH ${path}: ${(err as Error).message ?? String(err)}`, err);
    } finally {
      this.notify({
        method: 'GET',
        path,
        query: q,
        status,
        watch: true,
        durationMs: performance.now() - started,
      });
    }
  }

  /** A typed client for one resource. */
  resource<T extends KubeObject>(gvr: Gvr): ResourceClient<T> {
    return new ResourceClient<T>(this, gvr);
  }

  /** Closes the connection pool: waits up to `graceMs` for requests in flight, then destroys the sockets. */
  async close(graceMs = 1_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const closed = this.dispatcher.close().then(
      () => true,
      () => false,
    );
    const inTime = await Promise.race([
      closed,
      new Promise<false>((r) => (timer = setTimeout(() => r(false), timerDelay(graceMs)))),
    ]);
    clearTimeout(timer);
    if (!inTime) await this.dispatcher.destroy().catch(() => undefined);
  }
}

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  signal?: AbortSignal;
}

/** list/watch/get/create/update/patch/delete of one resource, namespaced or cluster-wide. */
export class ResourceClient<T extends KubeObject> {
  readonly kube: KubeClient;
  readonly gvr: Gvr;
  constructor(kube: KubeClient, gvr: Gvr) {
    this.kube = kube;
    this.gvr = gvr;
  }

  /** The collection path; `namespace` '' or undefined means all namespaces (for namespaced resources). */
  path(namespace?: string, name?: string, subresource?: string): string {
    const g = this.gvr;
    let p = g.group ? `/apis/${g.group}/${g.version}` : `/api/${g.version}`;
    if (g.namespaced && namespace) p += `/namespaces/${encodeURIComponent(namespace)}`;
    p += `/${g.resource}`;
    if (name !== undefined) p += `/${encodeURIComponent(name)}`;
    if (subresource) p += `/${subresource}`;
    return p;
  }

  list(namespace: string | undefined, opts: ListOptions = {}): Promise<KubeList<T>> {
    const { signal, ...query } = opts;
    return this.kube.request<KubeList<T>>('GET', this.path(namespace), { query: { ...query }, signal });
  }

  watch(
    namespace: string | undefined,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (ev: WatchEvent<T>) => void,
    opts: { signal?: AbortSignal; idleTimeoutMs?: number } = {},
  ): Promise<void> {
    return this.kube.watch<T>(this.path(namespace), query, onEvent, opts);
  }

  get(namespace: string | undefined, name: string, signal?: AbortSignal): Promise<T> {
    return this.kube.request<T>('GET', this.path(namespace, name), { signal });
  }

  create(obj: T, opts: { dryRun?: boolean; fieldManager?: string; signal?: AbortSignal } = {}): Promise<T> {
    return this.kube.request<T>('POST', this.path(obj.metadata.namespace), {
      body: obj,
      query: { dryRun: opts.dryRun ? 'All' : undefined, fieldManager: opts.fieldManager },
      signal: opts.signal,
    });
  }

  /** PUT: optimistic concurrency through `metadata.resourceVersion` (409 when stale). */
  update(obj: T, opts: { subresource?: string; signal?: AbortSignal } = {}): Promise<T> {
    return this.kube.request<T>(
      'PUT',
      this.path(obj.metadata.namespace, obj.metadata.name, opts.subresource),
      {
        body: obj,
        signal: opts.signal,
      },
    );
  }

  patch(
    namespace: string | undefined,
    name: string,
    patch: unknown,
    opts: {
      type?: PatchType;
      subresource?: string;
      fieldManager?: string;
      force?: boolean;
      dryRun?: boolean;
      signal?: AbortSignal;
    } = {},
  ): Promise<T> {
    const type = opts.type ?? 'merge';
    return this.kube.request<T>('PATCH', this.path(namespace, name, opts.subresource), {
      body: patch,
      contentType: PATCH_TYPES[type],
      query: {
        fieldManager: opts.fieldManager,
        force: opts.force === undefined ? undefined : String(opts.force),
        dryRun: opts.dryRun ? 'All' : undefined,
      },
      signal: opts.signal,
    });
  }

  /** JSON merge patch of the `/status` subresource (spec, and so generation, are never touched). */
  patchStatus(namespace: string | undefined, name: string, patch: unknown, signal?: AbortSignal): Promise<T> {
    return this.patch(namespace, name, patch, { subresource: 'status', signal });
  }

  delete(namespace: string | undefined, name: string, signal?: AbortSignal): Promise<unknown> {
    return this.kube.request('DELETE', this.path(namespace, name), { signal });
  }
}

/** `namespace/name` for namespaced objects, `name` for cluster-scoped ones (as client-go's MetaNamespaceKey). */
export function objectKey(obj: { metadata: { name: string; namespace?: string } }): string {
  return obj.metadata.namespace ? `${obj.metadata.namespace}/${obj.metadata.name}` : obj.metadata.name;
}

export function splitKey(key: string): { namespace: string | undefined; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { namespace: undefined, name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

function cleanQuery(
  query: Record<string, string | number | boolean | undefined> | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== '') out[k] = String(v);
  return out;
}

function apiErrorFrom(status: number, text: string, method: string, path: string): ApiError {
  let reason = 'Unknown';
  // Redacted before it is cut (and kept): an apiserver may quote what it was sent.
  let message = redactBounded(text, 512);
  try {
    const s = JSON.parse(text) as KubeStatus;
    if (s && s.kind === 'Status') {
      reason = s.reason ?? reason;
      message = s.message ?? message;
    }
  } catch {
    // not JSON
  }
  return new ApiError(status, reason, `${method} ${path}: HTTP ${status} ${reason}: ${message}`);
}

/** The texts of `Warning: 299 - "text"` headers (RFC 7234 warn-text; the apiserver sends code 299, agent "-"). */
function warningTexts(header: string | string[]): string[] {
  return (Array.isArray(header) ? header : [header]).map((h) => {
    const m = /^\d{3} \S+ "((?:[^"\\]|\\.)*)"/.exec(h);
    return m ? m[1]!.replace(/\\(.)/g, '$1') : h;
  });
}
