/**
 * `peerload agent`'s HTTP API, for the operator only (bearer token, auth.ts):
 * - `PUT /v1/models/{name}` with a version spec (spec.ts): 202 and the download starts; 202 again while it runs
 *   (one download per name and version); 200 when the version is already in place; 4xx/507 with a JSON error when
 *   it cannot start (bad body, no credentials, over the byte cap, not enough free space).
 * - `GET /v1/models/{name}`: every known version with its progress (files done/total, bytes, per-file local hits
 *   and hard links, the failure); versions found on disk from an earlier run (or `peerload fetch`) are `Ready`,
 *   with the detail their record kept (record.ts), else without file detail.
 * - `DELETE /v1/models/{name}/versions/{version}`: stops a running download and removes the version directory.
 * - `GET /healthz`: 200 without a token, for the kubelet's probes (it says nothing about models).
 * Every error is `{"error": {"reason", "message"}}`, redacted; nothing is logged with a URL's query values.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { redact, redactDeep } from '../redact.ts';
import { authorize } from './auth.ts';
import {
  DownloadRefused,
  TEMP_PREFIX,
  downloadVersion,
  newProgress,
  preflight,
  removeEmptyModelDirectory,
  type DownloaderConfig,
  type VersionProgress,
} from '../place/placer.ts';
import { readRecord, removeRecord } from '../place/record.ts';
import { MAX_SPEC_BYTES, ModelVersionSpecSchema, SEGMENT, specProblems } from '../place/spec.ts';

/** The operator builds no larger body (spec.ts). */
const MAX_BODY_BYTES = MAX_SPEC_BYTES;

export interface AgentServerOptions extends DownloaderConfig {
  host?: string | undefined;
  port?: number | undefined;
  /** The operator's token (tokenFile() in auth.ts); read for every call. */
  token: () => Promise<string | undefined>;
}

export interface AgentServer {
  url: string;
  port: number;
  /** name -> version -> progress (the running and finished downloads of this process). */
  versions: Map<string, Map<string, VersionProgress>>;
  /** Resolves when no download runs (tests). */
  idle(): Promise<void>;
  close(): Promise<void>;
}

class HttpProblem extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(status: number, reason: string, message: string) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(redactDeep(body));
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, reason: string, message: string, headers = {}): void {
  send(res, status, { error: { reason, message: redact(message) } }, headers);
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES)
      throw new HttpProblem(413, 'BodyTooLarge', `the body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The summary of a version without its per-file list (for PUT answers). */
function summary(p: VersionProgress) {
  const { files: _files, ...rest } = p;
  return rest;
}

/** The API's state and routes: the versions this process knows and the downloads running. */
class AgentApi {
  readonly versions = new Map<string, Map<string, VersionProgress>>();
  private readonly running = new Map<
    string,
    { controller: AbortController; done: Promise<unknown>; started: Promise<void> }
  >();
  private readonly opts: AgentServerOptions;
  private readonly log: AgentServerOptions['logger'];

  constructor(opts: AgentServerOptions) {
    this.opts = opts;
    this.log = opts.logger;
  }

  /** Stops every download and waits for them. */
  async stop(): Promise<void> {
    for (const r of this.running.values()) r.controller.abort(new Error('agent stopping'));
    await this.idle();
  }

  async put(name: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    let json: unknown;
    try {
      json = JSON.parse(await readBody(req));
    } catch (e) {
      if (e instanceof HttpProblem) throw e;
      throw new HttpProblem(400, 'InvalidBody', 'the body is not JSON');
    }
    const parsed = ModelVersionSpecSchema.safeParse(json);
    if (!parsed.success) throw new HttpProblem(400, 'InvalidSpec', specProblems(parsed.error));
    const spec = parsed.data;
    const key = `${name}/${spec.version}`;
    const current = this.versions.get(name)?.get(spec.version);
    const claimed = this.running.get(key);
    if (claimed) {
      await claimed.started;
      const now = this.versions.get(name)?.get(spec.version);
      if (this.running.has(key) && now) {
        send(res, 202, { ...summary(now), message: 'a download of this version is in progress' });
        return;
      }
    }
    // Claimed before the first await, so that two PUTs at once start one download.
    let started!: () => void;
    const run = {
      controller: new AbortController(),
      done: Promise.resolve() as Promise<unknown>,
      started: new Promise<void>((r) => (started = r)),
    };
    this.running.set(key, run);
    try {
      let target: string | undefined;
      try {
        target = await preflight(name, spec, this.opts);
      } catch (e) {
        this.running.delete(key);
        if (e instanceof DownloadRefused) throw new HttpProblem(e.status, e.reason, e.message);
        throw e;
      }
      if (target === undefined) {
        this.running.delete(key);
        const ready =
          current?.state === 'Ready'
            ? current
            : { ...newProgress(name, spec, this.opts.rule), state: 'Ready' as const };
        send(res, 200, { ...summary(ready), message: 'the version is in place' });
        return;
      }
      const progress = newProgress(name, spec, this.opts.rule);
      if (!this.versions.has(name)) this.versions.set(name, new Map());
      this.versions.get(name)!.set(spec.version, progress);
      this.log?.info({ model: name, version: spec.version, files: spec.files.length }, 'download started');
      run.done = downloadVersion(name, spec, this.opts, progress, run.controller.signal).finally(() =>
        this.running.delete(key),
      );
      send(res, 202, summary(progress));
    } finally {
      started();
    }
  }

  async onDisk(name: string): Promise<string[]> {
    const entries = await readdir(join(this.opts.root, name), { withFileTypes: true }).catch(() => []);
    return entries.filter((e) => e.isDirectory() && !e.name.startsWith(TEMP_PREFIX)).map((e) => e.name);
  }

  async get(name: string, res: ServerResponse): Promise<void> {
    const known = this.versions.get(name) ?? new Map<string, VersionProgress>();
    const list: unknown[] = [...known.values()];
    for (const v of await this.onDisk(name)) {
      if (known.has(v)) continue;
      // Placed by an earlier process (peerload fetch, this agent before a restart): its record, when it left one.
      const recorded = await readRecord(this.opts.root, name, v);
      list.push(recorded ?? { name, version: v, directory: name, state: 'Ready', files: [] });
    }
    if (list.length === 0)
      throw new HttpProblem(404, 'NotFound', `the agent has no version of model ${name}`);
    send(res, 200, { name, versions: list });
  }

  async del(name: string, version: string, res: ServerResponse): Promise<void> {
    const progress = this.versions.get(name)?.get(version);
    const run = this.running.get(`${name}/${version}`);
    if (run) {
      await run.started;
      run.controller.abort(new Error('deleted'));
      await run.done;
    }
    const dir = join(this.opts.root, progress?.directory ?? name, version);
    const present = await stat(dir).then(
      () => true,
      () => false,
    );
    if (!progress && !present)
      throw new HttpProblem(404, 'NotFound', `the agent has no version ${version} of model ${name}`);
    await rm(dir, { recursive: true, force: true });
    await removeRecord(this.opts.root, progress?.directory ?? name, version);
    await removeEmptyModelDirectory(this.opts.root, progress?.directory ?? name);
    this.versions.get(name)?.delete(version);
    this.log?.info({ model: name, version }, 'version removed');
    send(res, 200, { name, version, deleted: true });
  }

  async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://agent');
    if (url.pathname === '/healthz' && req.method === 'GET') {
      send(res, 200, { ok: true });
      return;
    }
    const auth = authorize(req.headers.authorization, await this.opts.token());
    if (!auth.ok) {
      this.log?.warn({ reason: auth.reason, path: url.pathname }, 'call refused');
      sendError(
        res,
        auth.status,
        auth.reason,
        auth.message,
        auth.status === 401 ? { 'www-authenticate': 'Bearer realm="peerload-agent"' } : {},
      );
      return;
    }
    const m = /^\/v1\/models\/([^/]+)(?:\/versions\/([^/]+))?$/.exec(url.pathname);
    if (!m) throw new HttpProblem(404, 'NotFound', `no route ${url.pathname}`);
    let name: string;
    let version: string | undefined;
    try {
      name = decodeURIComponent(m[1]!);
      version = m[2] !== undefined ? decodeURIComponent(m[2]) : undefined;
    } catch {
      throw new HttpProblem(400, 'InvalidName', 'the path is not valid percent-encoding');
    }
    if (!SEGMENT.test(name) || (version !== undefined && !SEGMENT.test(version)))
      throw new HttpProblem(
        400,
        'InvalidName',
        'model and version names are one path segment of letters, digits, . _ - (not starting with .)',
      );
    const method = req.method ?? 'GET';
    if (version === undefined && method === 'PUT') return await this.put(name, req, res);
    if (version === undefined && method === 'GET') return await this.get(name, res);
    if (version !== undefined && method === 'DELETE') return await this.del(name, version, res);
    throw new HttpProblem(405, 'MethodNotAllowed', `${method} is not allowed on ${url.pathname}`);
  }

  async idle(): Promise<void> {
    const settled = async (r: { started: Promise<void>; done: Promise<unknown> }) => {
      await r.started; // `done` is the download's only once it started
      await r.done;
    };
    while (this.running.size > 0) await Promise.all([...this.running.values()].map(settled));
  }
}

export async function startAgentServer(opts: AgentServerOptions): Promise<AgentServer> {
  const api = new AgentApi(opts);
  const log = opts.logger;
  const server = createServer((req, res) => {
    api.route(req, res).catch((e: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (e instanceof HttpProblem) {
        sendError(res, e.status, e.reason, e.message);
        return;
      }
      log?.error({ err: e }, 'request failed');
      sendError(res, 500, 'InternalError', e instanceof Error ? e.message : String(e));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const host = opts.host ?? '127.0.0.1';
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    versions: api.versions,
    idle: () => api.idle(),
    async close() {
      await api.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
