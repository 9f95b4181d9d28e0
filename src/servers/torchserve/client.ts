/**
 * Client of one model-server replica's management API (TorchServe), plus the
 * endpoint plugin's register call (`POST /p2p/models`). Knows nothing of Kubernetes: a replica is a base URL and a token.
 *
 * Many replicas share one pooled undici dispatcher ({@link sharedModelServerPool} unless one is given). The
 * exchange itself is the shared HTTP layer's (src/http/: time-out composed with the caller's AbortSignal, bounded
 * body reads, one retry classification). Every response is validated (zod, wire.ts) and every failure is a typed
 * {@link ModelServerError}.
 *
 * A client is a cheap object; create one per replica when needed. Its {@link TokenSource}, however, should live
 * as long as the replica does (one per replica, kept across reconciles): renewal is single-flight per source.
 */
import { USER_AGENT } from '../../version.ts';
import type { Dispatcher } from 'undici';
import type { z } from 'zod';
import { sharedModelServerPool, sharedRegistrationPool } from '../pools.ts';
import { type TokenContext, type TokenSource, TokenUnavailableError, staticToken } from './auth.ts';
import {
  INVALID_KEY_EXCEPTION,
  ModelServerError,
  TORCHSERVE_EXCEPTIONS,
  TORCHSERVE_STATUS_EXCEPTIONS,
  isModelServerError,
} from './errors.ts';
import { isRejection, readRegisterAnswer, registerQuery } from './register.ts';
import type {
  CallOptions,
  ModelListPage,
  ModelServerClientOptions,
  RegisterRequest,
  RegisterResult,
  ScaleRequest,
  ScaleResult,
  StatusResult,
} from './types.ts';
import {
  DescribeBody,
  ListBody,
  StatusBody,
  errorFields,
  type ModelDescription,
  type ModelSummary,
} from './wire.ts';
import { DEFAULT_MAX_RESPONSE_BYTES, parseBody } from '../../http/body.ts';
import { INVALID_RESPONSE, UNUSABLE_RESPONSE_KIND, kindForStatus } from '../../http/classify.ts';
import { answerWords, boundDetail, knownWord, type HttpErrorInit } from '../../http/errors.ts';
import { headerValue, queryString, sendRequest, type HttpResponse } from '../../http/request.ts';
import { parseRetryAfter } from '../../http/retry.ts';

/** Path of the peerload endpoint plugin. */
export const DEFAULT_PLUGIN_PATH = 'p2p';

interface Exchange {
  operation: string;
  method: Dispatcher.HttpMethod;
  path: string;
  query?: Record<string, string | number | boolean | undefined>;
  timeoutMs: number;
  call: CallOptions | undefined;
  /** Lasts as long as a download (a registration): sent on the registration pool. */
  long?: boolean;
}

export class ModelServerClient {
  /** Management base URL (no credentials), used in error messages and as the identity of the replica. */
  readonly endpoint: string;
  readonly pluginPath: string;
  private readonly origin: string;
  private readonly basePath: string;
  private readonly token: TokenSource | undefined;
  private readonly dispatcher: Dispatcher;
  /** Registrations' long POSTs: their own pool, so that they never hold the sockets of the short calls. */
  private readonly registrationDispatcher: Dispatcher;
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
    this.dispatcher = opts.dispatcher ?? sharedModelServerPool();
    this.registrationDispatcher = opts.dispatcher ?? sharedRegistrationPool();
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.registerTimeoutMs = opts.registerTimeoutMs ?? 30 * 60_000;
    this.maxResponseBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
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
      query: registerQuery(req),
      timeoutMs: call?.timeoutMs ?? this.registerTimeoutMs,
      call,
      long: true,
    });
    if (res.status >= 300) throw this.errorFrom(operation, res);
    const answer = readRegisterAnswer(res.status, res.text, req);
    if (!isRejection(answer)) return answer;
    throw new ModelServerError({
      kind: answer.kind,
      status: res.status,
      serverType: answer.serverType,
      serverMessage: boundDetail(answer.message, this.secrets()),
      operation,
      endpoint: this.endpoint,
      code: answer.code,
    });
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

  /**
   * `POST /predictions/{name}/{version}` on the inference API (`port` on the replica's host): a canary's probe. No
   * management key is sent (the inference API has its own, which the operator does not hold). Any status is an
   * answer; the body is read up to `maxBytes` (an error answer cut, a 2xx one refused past it).
   */
  async predict(
    name: string,
    version: string,
    req: { port: number; body: string; maxBytes: number },
    call?: CallOptions,
  ): Promise<{ status: number; text: string }> {
    const url = new URL(this.origin);
    url.port = String(req.port);
    const operation = `predict ${name}/${version}`;
    const res = await sendRequest(
      {
        dispatcher: this.dispatcher,
        origin: url.origin,
        path: `/predictions/${encodeURIComponent(name)}/${encodeURIComponent(version)}`,
        method: 'POST',
        headers: { accept: 'application/json', 'content-type': 'application/json', 'user-agent': USER_AGENT },
        body: req.body,
        timeoutMs: call?.timeoutMs ?? this.timeoutMs,
        signal: call?.signal,
        maxResponseBytes: req.maxBytes,
        operation,
        secrets: this.secrets(),
      },
      (init: HttpErrorInit) =>
        new ModelServerError({ ...init, serverMessage: init.detail, endpoint: url.origin }),
    );
    return { status: res.status, text: res.text };
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
  private async exchange(x: Exchange): Promise<HttpResponse> {
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
        serverMessage: boundDetail(
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

  private send(x: Exchange, key: string | undefined): Promise<HttpResponse> {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': USER_AGENT };
    if (key !== undefined) headers['authorization'] = `Bearer ${key}`;
    return sendRequest(
      {
        dispatcher: x.long ? this.registrationDispatcher : this.dispatcher,
        origin: this.origin,
        path: this.basePath + x.path + queryString(x.query),
        method: x.method,
        headers,
        timeoutMs: x.timeoutMs,
        signal: x.call?.signal,
        maxResponseBytes: this.maxResponseBytes,
        operation: x.operation,
        secrets: this.secrets(),
      },
      (init: HttpErrorInit) =>
        new ModelServerError({ ...init, serverMessage: init.detail, endpoint: this.endpoint }),
    );
  }

  private parse<T extends z.ZodType>(operation: string, res: HttpResponse, schema: T): z.output<T> {
    const parsed = parseBody(res.text, schema);
    if (parsed.ok) return parsed.data;
    throw new ModelServerError({
      kind: UNUSABLE_RESPONSE_KIND,
      status: res.status,
      // The problem only, never the body: the endpoint may be any address (errors.ts says why).
      serverMessage: parsed.problem,
      operation,
      endpoint: this.endpoint,
      code: INVALID_RESPONSE,
    });
  }

  /**
   * An error out of a >= 300 answer: its status and TorchServe's exception `type` when it is a known one, never
   * the server's message (errors.ts says why).
   */
  private errorFrom(operation: string, res: HttpResponse): ModelServerError {
    const { type } = errorFields(res.text);
    return new ModelServerError({
      kind: kindForStatus(res.status, type, TORCHSERVE_STATUS_EXCEPTIONS),
      status: res.status,
      serverType: knownWord(type, TORCHSERVE_EXCEPTIONS),
      serverMessage: answerWords(res.status),
      operation,
      endpoint: this.endpoint,
      retryAfterMs:
        res.status === 429 || res.status === 503
          ? parseRetryAfter(headerValue(res.headers['retry-after']))
          : undefined,
    });
  }

  private secrets(): readonly string[] {
    return this.token?.secrets() ?? [];
  }
}

function isInvalidKey(res: HttpResponse): boolean {
  return res.status === 400 && errorFields(res.text).type === INVALID_KEY_EXCEPTION;
}

function modelPath(name: string, version?: string): string {
  if (name === '') throw new TypeError('model name is required');
  const base = `/models/${encodeURIComponent(name)}`;
  return version === undefined ? base : `${base}/${encodeURIComponent(version)}`;
}
