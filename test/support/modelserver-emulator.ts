/**
 * Model-server emulator: TorchServe 0.12's management API as its source answers it (ManagementRequestHandler,
 * ApiUtils, TokenAuthorizationHandler, HttpRequestHandler), plus
 * the two endpoint plugins: `p2p` (peerload's, valid JSON, meaningful statuses) and `dragonfly` (the third-party
 * one: HTTP 200 on every failure, body formatted by hand and invalid JSON whenever the message holds quotes).
 *
 * Light on purpose: one `node:http` server per instance and in-memory state, so one process runs 100+ instances
 * (see {@link startModelServerFleet}). Each instance has its own port and base URL, like one pod each.
 *
 * What is emulated, per instance:
 * - register through a plugin (`POST /{p2p|dragonfly}/models?file_name=`): a real HTTP GET of
 *   `objectURL(fileName)`, through the peer proxy at `proxyURL` when given (absolute-form request line, both filter
 *   headers, optional tag/application), then registration with 0 workers (TorchServe's "Model ... registered" message), 409 on duplicates;
 * - `POST /models?url=` (model API), describe (always an array; workers UNLOADING, READY after `workerStartMs`),
 *   list with TorchServe's paging (including its `nextPageToken` on an exactly full last page), scale (202 with the
 *   no-cache headers; 200/206 when synchronous), set-default, unregister (403 for a default version while others
 *   exist); model API gate (`enableModelApi`: POST /models and DELETE answer 405 when off — as in 0.12's source);
 * - token authorization with key expiry and `GET /token?type=management` rotation (empty 200 body; the new key is
 *   only in the key file, see {@link ModelServerEmulator.keyFile}), 400 InvalidKeyException otherwise; like
 *   TorchServe, any request whose URI contains `/token` is treated as a token request;
 * - error bodies `{"code","type","message"}` with `Connection: close` for >= 400;
 * - registration latency, failure injection (down / HTTP errors / slow), archives that do not load
 *   (`rejectArchive`: 400 InvalidModelException), `wipe()` (a restarted process), counters;
 * - the inference API's predictions (`inferencePort`): `POST /predictions/{name}/{version}` answered by the
 *   model's handler (`predict`, by version: a version can answer wrongly), 404 ModelNotFoundException for a
 *   version not registered, 503 ServiceUnavailableException without a READY worker (InferenceRequestHandler).
 */
import { randomUUID } from 'node:crypto';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import {
  HttpError,
  NOT_FOUND_MESSAGE,
  NO_CACHE_HEADERS,
  type Reply,
  errorTypeFor,
  methodNotAllowed,
  routeLabel,
  sleep,
} from './modelserver-emulator-http.ts';
import { EmulatorPlugins } from './modelserver-emulator-plugins.ts';
import {
  type FailureInjection,
  type ModelServerEmulator,
  type ModelServerEmulatorOptions,
  type ModelServerFleet,
  emptyStats,
} from './modelserver-emulator-types.ts';

// The instance class is built in layers, one file each: token authorization (modelserver-emulator-auth.ts),
// registrations and the management API (-management.ts), the endpoint plugins (-plugins.ts); this file adds the
// server: listening, failure injection, dispatch. The options and public shape are in -types.ts.
export type {
  DownloadRecord,
  EmulatedModel,
  EmulatedWorker,
  FailureInjection,
  ModelServerEmulator,
  ModelServerEmulatorAuth,
  ModelServerEmulatorOptions,
  ModelServerEmulatorStats,
  ModelServerFleet,
} from './modelserver-emulator-types.ts';

// ---------------------------------------------------------------------------------------------------------------
// Instance

class Emulator extends EmulatorPlugins implements ModelServerEmulator {
  url = '';
  port = 0;
  inferencePort = 0;
  private readonly server: Server;
  private readonly inference: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private failure: FailureInjection | undefined;
  private failureUses = 0;
  private listening = false;

  constructor(opts: ModelServerEmulatorOptions) {
    super(opts);
    this.server = createServer({ keepAliveTimeout: 5_000 }, (req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    if (opts.inferencePort !== undefined) {
      this.inference = createServer({ keepAliveTimeout: 5_000 }, (req, res) => void this.predict(req, res));
      this.inference.on('connection', (s) => {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      });
    }
  }

  /** The inference server's listener, once (it stays up across failure injection: that is the management API's). */
  async listenInference(): Promise<void> {
    const server = this.inference;
    if (!server) return;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.inferencePort, this.opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.inferencePort = (server.address() as AddressInfo).port;
  }

  /** `POST /predictions/{name}/{version}`: TorchServe's InferenceRequestHandler, with the handler's answer. */
  private async predict(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const segments = new URL(req.url ?? '/', 'http://emulator').pathname.split('/');
    let reply: Reply;
    try {
      if (segments[1] !== 'predictions' || segments.length !== 4)
        throw new HttpError(404, 'ResourceNotFoundException', NOT_FOUND_MESSAGE);
      if (req.method !== 'POST') throw methodNotAllowed();
      const name = decodeURIComponent(segments[2]!);
      const version = decodeURIComponent(segments[3]!);
      const key = `${name}/${version}`;
      this.stats.predictions[key] = (this.stats.predictions[key] ?? 0) + 1;
      const m = this.model(name).find((v) => v.modelVersion === version);
      if (!m) throw new HttpError(404, 'ModelNotFoundException', `Model not found: ${name}`);
      if (!m.workers.some((w) => w.readyAt <= Date.now()))
        throw new HttpError(
          503,
          'ServiceUnavailableException',
          `Model "${name}" has no worker to serve inference request. Please use scale workers API to add workers.`,
        );
      let input: unknown;
      try {
        input = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        input = undefined;
      }
      const json = this.opts.predict
        ? this.opts.predict(name, version, input)
        : { model: name, version, input };
      reply = { status: 200, json };
    } catch (e) {
      const err = e instanceof HttpError ? e : new HttpError(500, 'InternalServerException', String(e));
      reply = { status: err.status, json: { code: err.status, type: err.type, message: err.message } };
    }
    this.send(res, reply);
  }

  async listen(port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(e);
      this.server.once('error', onError);
      this.server.listen(port, this.opts.host ?? '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    this.port = (this.server.address() as AddressInfo).port;
    this.url = `http://${this.opts.host ?? '127.0.0.1'}:${this.port}`;
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
    const inference = this.inference;
    if (inference?.listening) {
      const closed = new Promise<void>((r) => inference.close(() => r()));
      for (const s of this.sockets) s.destroy();
      await closed;
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
}

// ---------------------------------------------------------------------------------------------------------------
// Entry points

/** Starts one emulated model server on 127.0.0.1. */
export async function startModelServerEmulator(
  opts: ModelServerEmulatorOptions = {},
): Promise<ModelServerEmulator> {
  const emu = new Emulator(opts);
  await emu.listen(opts.port ?? 0);
  await emu.listenInference();
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
          if (k === 'requests' || k === 'predictions') {
            const into = total[k];
            for (const [route, count] of Object.entries(v as Record<string, number>)) {
              into[route] = (into[route] ?? 0) + count;
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

/** The version an archive named `<name>-v<N>.mar` registers (`modelVersion` of a fleet whose archives say it): N,
 *  or 0 without one. */
export const marVersion = (fileName: string): string => /-v(\d+)\.mar$/.exec(fileName)?.[1] ?? '0';
