/**
 * Peer-proxy emulator: an HTTP forward proxy that behaves like the P2P peer daemon on :4001
 * (shared/contracts/peer-proxy.md), for tests and local development.
 *
 * - Absolute-form requests (`GET http://origin/x HTTP/1.1`). URLs matching `rules` (default: all), or requests
 *   with `X-Dragonfly-Use-P2P: true`, go "through P2P": task id from src/storage/taskid.ts with the request's
 *   filter headers (current `X-Dragonfly-Filtered-Query-Params`, else legacy `X-Dragonfly-Filter`, else
 *   `defaultFilter`), `X-Dragonfly-Tag`, `-Application`, `-Piece-Length`; content cached ON DISK by task id.
 *   Other requests are forwarded directly, uncached.
 * - One origin fetch per task id however many requests wait for it; bodies are streamed to and from disk, never
 *   held in memory.
 * - Response headers `X-Dragonfly-Task-ID`, `X-Dragonfly-Task-Download-Finished: true` on a local hit; origin
 *   errors passed through with `X-Dragonfly-Error-Type: backend`; injected failures `proxy` / `dfdaemon` /
 *   `backend` or a connection reset.
 * - `GET /peer/tasks/<taskID>` on the proxy itself serves a cached task: another instance configured with
 *   `parent` asks it on a local miss before going to the origin (a "remote peer" hit).
 */
import { createReadStream, createWriteStream, existsSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import { Agent, ProxyAgent, request as undiciRequest, type Dispatcher } from 'undici';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  DOWNLOAD_FINISHED_HEADER,
  ERROR_TYPE_HEADER,
  TASK_ID_HEADER,
  USE_P2P_HEADER,
  identityFromHeaders,
  taskID as computeTaskID,
} from '../../src/storage/taskid.ts';

export interface PeerProxyOptions {
  host?: string /*127.0.0.1*/;
  port?: number /*0 = free*/;
  rules?: RegExp[] /*URLs routed through P2P + cached; default all*/;
  defaultFilter?: string[] /*used when a request has no filter header*/;
  parent?: string /*base URL of another PeerProxy acting as a remote peer: on a local miss ask it by task id before the origin*/;
  cacheDir?: string;
}

export interface PeerProxyStats {
  /** Client requests through the proxy (internal /peer routes excluded). */
  requests: number;
  /** Requests this peer sent to origins (cache fills, preheats, direct forwards). */
  originRequests: number;
  /** Body bytes received from origins. */
  originBytes: number;
  /** localHits + remoteHits. */
  cacheHits: number;
  localHits: number;
  remoteHits: number;
  /** P2P requests that had to go to the origin. */
  cacheMisses: number;
  /** preheat() calls (a seed peer's downloads for the manager). */
  preheats: number;
  /** Tasks served to other peers through /peer/tasks/<id>. */
  servedToPeers: number;
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  taskID?: string;
  cacheHit: boolean;
  status: number;
}

export type PeerFailureMode = 'backend' | 'proxy' | 'dfdaemon' | 'reset';

export interface PreheatOptions {
  filter?: string[];
  tag?: string;
  application?: string;
  pieceLength?: number;
  headers?: Record<string, string>;
}

export interface PeerProxy {
  url: string;
  port: number;
  stats: PeerProxyStats;
  requests: RecordedRequest[];
  hasTask(taskID: string): boolean;
  preheat(url: string, opts?: PreheatOptions): Promise<{ taskID: string; bytes: number }>;
  failNext(count: number, mode: PeerFailureMode): void;
  /** The next `count` preheat() calls fail (a seed peer that cannot download). */
  failNextPreheats(count: number): void;
  /** Task ids currently cached. */
  tasks(): string[];
  cacheDir: string;
  reset(): void /*clear cache+stats*/;
  close(): Promise<void>;
}

/** Error of preheat(): origin answered non-2xx, was unreachable, or a failure was injected. */
export class PeerProxyError extends Error {
  readonly status: number;
  readonly errorType: 'backend' | 'proxy' | 'dfdaemon';
  constructor(message: string, status: number, errorType: 'backend' | 'proxy' | 'dfdaemon') {
    super(message);
    this.name = 'PeerProxyError';
    this.status = status;
    this.errorType = errorType;
  }
}

interface Entry {
  size: number;
  contentType?: string;
  etag?: string;
  lastModified?: string;
}

type Fill =
  | { ok: true; entry: Entry; source: 'origin' | 'parent' }
  | { ok: false; status: number; headers: Record<string, string>; body: Buffer; errorType: 'backend' };

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
]);

const MAX_ERROR_BODY = 64 * 1024;

function newStats(): PeerProxyStats {
  return {
    requests: 0,
    originRequests: 0,
    originBytes: 0,
    cacheHits: 0,
    localHits: 0,
    remoteHits: 0,
    cacheMisses: 0,
    preheats: 0,
    servedToPeers: 0,
  };
}

function flatHeaders(h: IncomingMessage['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

function forwardableHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    const key = k.toLowerCase();
    if (HOP_BY_HOP.has(key) || key.startsWith('x-dragonfly-')) continue;
    out[key] = v;
  }
  return out;
}

function undiciHeaders(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

/** Counts bytes flowing through (origin bandwidth). */
function counter(onBytes: (n: number) => void): Transform {
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      onBytes(chunk.length);
      cb(null, chunk);
    },
  });
}

/** `bytes=a-b`, `bytes=a-`, `bytes=-n` against `size`; undefined when absent or unsatisfiable/multi-range. */
function parseRange(header: string | undefined, size: number): { start: number; end: number } | undefined {
  if (!header) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return undefined;
  let start: number;
  let end: number;
  if (m[1] === '') {
    start = Math.max(0, size - Number(m[2]));
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(size - 1, Number(m[2]));
  }
  if (start > end || start >= size) return undefined;
  return { start, end };
}

export async function startPeerProxy(opts: PeerProxyOptions = {}): Promise<PeerProxy> {
  const host = opts.host ?? '127.0.0.1';
  const rules = opts.rules;
  const defaultFilter = opts.defaultFilter ?? [...DEFAULT_FILTERED_QUERY_PARAMS];
  const parent = opts.parent?.replace(/\/+$/, '');
  const ownsCacheDir = opts.cacheDir === undefined;
  const cacheDir = opts.cacheDir ?? (await mkdtemp(join(tmpdir(), 'peerproxy-')));
  await mkdir(cacheDir, { recursive: true });
  const agent = new Agent({ keepAliveTimeout: 5_000, connections: 64 });

  const stats = newStats();
  const requests: RecordedRequest[] = [];
  const index = new Map<string, Entry>();
  const fills = new Map<string, Promise<Fill>>();
  const failures: PeerFailureMode[] = [];
  let preheatFailures = 0;
  let generation = 0;

  const dataPath = (id: string) => join(cacheDir, `${id}.data`);
  const metaPath = (id: string) => join(cacheDir, `${id}.json`);

  function lookup(id: string): Entry | undefined {
    const hit = index.get(id);
    if (hit) return hit;
    return undefined;
  }

  /** Loads entries left on disk by an earlier instance sharing `cacheDir`. */
  async function loadFromDisk(id: string): Promise<Entry | undefined> {
    if (!existsSync(metaPath(id)) || !existsSync(dataPath(id))) return undefined;
    try {
      const entry = JSON.parse(await readFile(metaPath(id), 'utf8')) as Entry;
      index.set(id, entry);
      return entry;
    } catch {
      return undefined;
    }
  }

  async function commit(id: string, tmp: string, entry: Entry, gen: number): Promise<Entry> {
    if (gen !== generation) {
      // reset() ran while downloading: drop the result.
      await unlink(tmp).catch(() => {});
      return entry;
    }
    await writeFile(metaPath(id), JSON.stringify(entry));
    await rename(tmp, dataPath(id));
    index.set(id, entry);
    return entry;
  }

  async function fetchFromParent(id: string, gen: number): Promise<Entry | undefined> {
    if (!parent) return undefined;
    let res: Dispatcher.ResponseData;
    try {
      res = await undiciRequest(`${parent}/peer/tasks/${id}`, { dispatcher: agent });
    } catch {
      return undefined;
    }
    if (res.statusCode !== 200) {
      await res.body.dump();
      return undefined;
    }
    const tmp = join(cacheDir, `${id}.${randomUUID()}.part`);
    await pipeline(res.body, createWriteStream(tmp));
    const { size } = await stat(tmp);
    const h = undiciHeaders(res.headers);
    const entry: Entry = { size };
    if (h['content-type']) entry.contentType = h['content-type'];
    if (h['etag']) entry.etag = h['etag'];
    if (h['last-modified']) entry.lastModified = h['last-modified'];
    return commit(id, tmp, entry, gen);
  }

  async function fetchFromOrigin(
    id: string,
    url: string,
    headers: Record<string, string>,
    gen: number,
  ): Promise<Fill> {
    stats.originRequests++;
    let res: Dispatcher.ResponseData;
    try {
      const fwd = forwardableHeaders(headers);
      delete fwd['range']; // a cache fill fetches the whole object
      res = await undiciRequest(url, { method: 'GET', headers: fwd, dispatcher: agent });
    } catch (e) {
      const body = Buffer.from(`origin unreachable: ${e instanceof Error ? e.message : String(e)}`);
      return {
        ok: false,
        status: 502,
        headers: { 'content-type': 'text/plain' },
        body,
        errorType: 'backend',
      };
    }
    const h = undiciHeaders(res.headers);
    if (res.statusCode < 200 || res.statusCode >= 300) {
      const chunks: Buffer[] = [];
      let total = 0;
      for await (const chunk of res.body) {
        const b = chunk as Buffer;
        stats.originBytes += b.length;
        if (total < MAX_ERROR_BODY) chunks.push(b);
        total += b.length;
      }
      const keep: Record<string, string> = {};
      if (h['content-type']) keep['content-type'] = h['content-type'];
      return {
        ok: false,
        status: res.statusCode,
        headers: keep,
        body: Buffer.concat(chunks).subarray(0, MAX_ERROR_BODY),
        errorType: 'backend',
      };
    }
    const tmp = join(cacheDir, `${id}.${randomUUID()}.part`);
    try {
      await pipeline(
        res.body,
        counter((n) => (stats.originBytes += n)),
        createWriteStream(tmp),
      );
    } catch (e) {
      await unlink(tmp).catch(() => {});
      const body = Buffer.from(`origin download failed: ${e instanceof Error ? e.message : String(e)}`);
      return {
        ok: false,
        status: 502,
        headers: { 'content-type': 'text/plain' },
        body,
        errorType: 'backend',
      };
    }
    const { size } = await stat(tmp);
    const entry: Entry = { size };
    if (h['content-type']) entry.contentType = h['content-type'];
    if (h['etag']) entry.etag = h['etag'];
    if (h['last-modified']) entry.lastModified = h['last-modified'];
    return { ok: true, entry: await commit(id, tmp, entry, gen), source: 'origin' };
  }

  /** Makes task `id` available locally: parent first, then origin. Single flight per task id. */
  function fill(id: string, url: string, headers: Record<string, string>): Promise<Fill> {
    const running = fills.get(id);
    if (running) return running;
    const gen = generation;
    const p = (async (): Promise<Fill> => {
      const fromParent = await fetchFromParent(id, gen);
      if (fromParent) return { ok: true, entry: fromParent, source: 'parent' };
      return fetchFromOrigin(id, url, headers, gen);
    })().finally(() => {
      if (fills.get(id) === p) fills.delete(id);
    });
    fills.set(id, p);
    return p;
  }

  function sendEntry(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    entry: Entry,
    extra: Record<string, string>,
  ): Promise<void> {
    const range = parseRange(req.headers['range'], entry.size);
    const headers: Record<string, string | number> = {
      [TASK_ID_HEADER]: id,
      'accept-ranges': 'bytes',
      ...extra,
    };
    if (entry.contentType) headers['content-type'] = entry.contentType;
    if (entry.etag) headers['etag'] = entry.etag;
    if (entry.lastModified) headers['last-modified'] = entry.lastModified;
    if (range) {
      headers['content-range'] = `bytes ${range.start}-${range.end}/${entry.size}`;
      headers['content-length'] = range.end - range.start + 1;
      res.writeHead(206, headers);
    } else {
      headers['content-length'] = entry.size;
      res.writeHead(200, headers);
    }
    if (req.method === 'HEAD') {
      res.end();
      return Promise.resolve();
    }
    const stream = createReadStream(dataPath(id), range ? { start: range.start, end: range.end } : {});
    return pipeline(stream, res).catch(() => {
      res.destroy();
    });
  }

  function sendError(
    res: ServerResponse,
    status: number,
    errorType: 'backend' | 'proxy' | 'dfdaemon',
    body: Buffer | string,
    headers: Record<string, string> = {},
    id?: string,
  ): void {
    const h: Record<string, string | number> = { ...headers, [ERROR_TYPE_HEADER]: errorType };
    if (!h['content-type']) h['content-type'] = 'text/plain';
    if (id) h[TASK_ID_HEADER] = id;
    const buf = typeof body === 'string' ? Buffer.from(body) : body;
    h['content-length'] = buf.length;
    res.writeHead(status, h);
    res.end(buf);
  }

  async function handlePeerRoute(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const m = /^\/peer\/tasks\/([0-9a-f]{64})$/.exec(path);
    if (!m || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    const id = m[1]!;
    const entry = lookup(id) ?? (await loadFromDisk(id));
    if (!entry) {
      res.writeHead(404, { 'content-type': 'text/plain', [TASK_ID_HEADER]: id }).end('task not found');
      return;
    }
    stats.servedToPeers++;
    await sendEntry(req, res, id, entry, {});
  }

  async function forwardDirect(
    req: IncomingMessage,
    res: ServerResponse,
    record: RecordedRequest,
  ): Promise<void> {
    stats.originRequests++;
    let upstream: Dispatcher.ResponseData;
    try {
      const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
      upstream = await undiciRequest(record.url, {
        method: req.method as Dispatcher.HttpMethod,
        headers: forwardableHeaders(record.headers),
        body: hasBody ? req : null,
        dispatcher: agent,
      });
    } catch (e) {
      record.status = 502;
      sendError(res, 502, 'backend', `origin unreachable: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    record.status = upstream.statusCode;
    const headers = forwardableHeaders(undiciHeaders(upstream.headers));
    if (upstream.statusCode >= 400) headers[ERROR_TYPE_HEADER.toLowerCase()] = 'backend';
    res.writeHead(upstream.statusCode, headers);
    await pipeline(
      upstream.body,
      counter((n) => (stats.originBytes += n)),
      res,
    ).catch(() => res.destroy());
  }

  async function handleProxy(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url!;
    const headers = flatHeaders(req.headers);
    stats.requests++;
    const record: RecordedRequest = { method: req.method ?? 'GET', url, headers, cacheHit: false, status: 0 };
    requests.push(record);

    const injected = failures.shift();
    if (injected) {
      if (injected === 'reset') {
        record.status = 0;
        req.socket.destroy();
        return;
      }
      record.status = injected === 'backend' ? 502 : 500;
      sendError(res, record.status, injected, `injected ${injected} failure`);
      return;
    }

    const viaP2P =
      (req.method === 'GET' || req.method === 'HEAD') &&
      (headers[USE_P2P_HEADER.toLowerCase()] === 'true' || !rules || rules.some((r) => r.test(url)));
    if (!viaP2P) {
      await forwardDirect(req, res, record);
      return;
    }

    let id: string;
    try {
      id = computeTaskID(identityFromHeaders(url, headers, defaultFilter));
    } catch {
      record.status = 400;
      sendError(res, 400, 'proxy', 'invalid url');
      return;
    }
    record.taskID = id;

    const local = lookup(id) ?? (await loadFromDisk(id));
    if (local) {
      stats.cacheHits++;
      stats.localHits++;
      record.cacheHit = true;
      record.status = parseRange(req.headers['range'], local.size) ? 206 : 200;
      await sendEntry(req, res, id, local, { [DOWNLOAD_FINISHED_HEADER]: 'true' });
      return;
    }

    const result = await fill(id, url, headers);
    if (!result.ok) {
      stats.cacheMisses++;
      record.status = result.status;
      sendError(res, result.status, result.errorType, result.body, result.headers, id);
      return;
    }
    if (result.source === 'parent') {
      stats.cacheHits++;
      stats.remoteHits++;
      record.cacheHit = true;
    } else {
      stats.cacheMisses++;
    }
    record.status = parseRange(req.headers['range'], result.entry.size) ? 206 : 200;
    await sendEntry(req, res, id, result.entry, {});
  }

  const server = createServer((req, res) => {
    const url = req.url ?? '/';
    const work = /^https?:\/\//i.test(url)
      ? handleProxy(req, res)
      : url.startsWith('/peer/')
        ? handlePeerRoute(req, res, url.split('?')[0]!)
        : Promise.resolve(
            void res
              .writeHead(400, { 'content-type': 'text/plain', [ERROR_TYPE_HEADER]: 'proxy' })
              .end('absolute-form request expected (this is a forward proxy)'),
          );
    work.catch((e: unknown) => {
      if (!res.headersSent) sendError(res, 500, 'dfdaemon', e instanceof Error ? e.message : String(e));
      else res.destroy();
    });
  });
  server.on('connect', (_req, socket) => {
    socket.end('HTTP/1.1 501 Not Implemented\r\nX-Dragonfly-Error-Type: proxy\r\nContent-Length: 0\r\n\r\n');
  });
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;

  const proxy: PeerProxy = {
    url: `http://${host}:${port}`,
    port,
    stats,
    requests,
    cacheDir,
    hasTask(id: string): boolean {
      return index.has(id) || (existsSync(metaPath(id)) && existsSync(dataPath(id)));
    },
    tasks(): string[] {
      return [...index.keys()];
    },
    async preheat(url: string, o: PreheatOptions = {}): Promise<{ taskID: string; bytes: number }> {
      stats.preheats++;
      const id = computeTaskID({
        url,
        filter: o.filter ?? defaultFilter,
        tag: o.tag || undefined,
        application: o.application || undefined,
        pieceLength: o.pieceLength,
      });
      if (preheatFailures > 0) {
        preheatFailures--;
        throw new PeerProxyError(`injected preheat failure for task ${id}`, 500, 'dfdaemon');
      }
      const cached = lookup(id) ?? (await loadFromDisk(id));
      if (cached) return { taskID: id, bytes: cached.size };
      const result = await fill(id, url, o.headers ?? {});
      if (!result.ok) {
        const text = result.body.toString('utf8').slice(0, 200);
        throw new PeerProxyError(
          `download of ${url} failed: HTTP ${result.status} ${text}`,
          result.status,
          'backend',
        );
      }
      return { taskID: id, bytes: result.entry.size };
    },
    failNext(count: number, mode: PeerFailureMode): void {
      for (let i = 0; i < count; i++) failures.push(mode);
    },
    failNextPreheats(count: number): void {
      preheatFailures += count;
    },
    reset(): void {
      generation++;
      for (const id of index.keys()) {
        rmSync(dataPath(id), { force: true });
        rmSync(metaPath(id), { force: true });
      }
      index.clear();
      fills.clear();
      failures.length = 0;
      preheatFailures = 0;
      requests.length = 0;
      Object.assign(stats, newStats());
    },
    async close(): Promise<void> {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await agent.close();
      if (ownsCacheDir) await rm(cacheDir, { recursive: true, force: true });
    },
  };
  return proxy;
}

/**
 * GET `url` through the proxy at `proxyURL` (absolute-form request line, as a client configured with an HTTP proxy
 * sends it; undici's ProxyAgent does not tunnel http:// targets). Convenience for tests: the body is read into
 * memory, so use it for small bodies.
 */
export async function fetchViaProxy(
  proxyURL: string,
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  const dispatcher = new ProxyAgent({ uri: proxyURL });
  try {
    const res = await undiciRequest(url, { method: 'GET', headers, dispatcher });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: undiciHeaders(res.headers), body };
  } finally {
    await dispatcher.close();
  }
}
