/**
 * Peer-proxy emulator: an HTTP forward proxy that behaves like the P2P peer daemon on :4001
 * (shared/contracts/peer-proxy.md), for tests and local development.
 *
 * As the real daemon (dragonfly-client 1.4.2, dragonfly-client/src/proxy/mod.rs) does:
 * - Absolute-form requests (`GET http://origin/x HTTP/1.1`). Only GET requests whose URL (without query and
 *   fragment) matches one of `rules` (the daemon's `proxy.rules`; default its stock `blobs/sha256.*`) or that carry
 *   `X-Dragonfly-Use-P2P: true` go "through P2P"; HEAD and every other request are forwarded directly, uncached.
 *   Task id from src/storage/taskid.ts under `daemonVersion`'s rule (default 1.4) with the request's
 *   `X-Dragonfly-Filtered-Query-Params` (else `defaultFilter`; the legacy `X-Dragonfly-Filter` is ignored),
 *   `X-Dragonfly-Tag`, `-Application`, `-Piece-Length`; content cached ON DISK by task id.
 * - One origin fetch per task id however many requests wait for it (a "fill"). Fills are cut-through, like the
 *   real daemon that serves pieces while it downloads them: the plain GET that starts a fill gets the bytes as they
 *   arrive while they are written to the cache file; its body completes only once the task is committed. Requests
 *   joining a running fill (and Range/HEAD requests) wait for the commit and are served from the file. Bodies are
 *   never held in memory.
 * - Response headers `X-Dragonfly-Task-ID` and `X-Dragonfly-Server-IP`, plus
 *   `X-Dragonfly-Task-Download-Finished: true` only on a LOCAL hit (a hit on the parent has none, like a miss). An
 *   origin error of a P2P request comes back with the origin's status and content type, `X-Dragonfly-Error-Type:
 *   backend` and an EMPTY body (an unreachable origin: 500); injected failures `proxy` / `dfdaemon` / `backend`
 *   (empty bodies too) or a connection reset.
 * - `GET /peer/tasks/<taskID>` on the proxy itself serves a cached task: another instance configured with
 *   `parent` asks it on a local miss before going to the origin (a "remote peer" hit).
 */
import { createReadStream, createWriteStream, existsSync, rmSync, type WriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { finished, pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import { Agent, ProxyAgent, request as undiciRequest, type Dispatcher } from 'undici';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  DEFAULT_TASK_ID_RULE,
  DOWNLOAD_FINISHED_HEADER,
  ERROR_TYPE_HEADER,
  LEGACY_FILTER_HEADER,
  TASK_ID_HEADER,
  USE_P2P_HEADER,
  identityFromHeaders,
  taskID as computeTaskID,
  type TaskIdRule,
} from '../../src/storage/taskid.ts';

/** The stock dfdaemon configuration's proxy.rules: container image blobs only. */
export const DAEMON_STOCK_RULES: readonly RegExp[] = [/blobs\/sha256.*/];
const SERVER_IP_HEADER = 'X-Dragonfly-Server-IP';

export interface PeerProxyOptions {
  host?: string /*127.0.0.1*/;
  port?: number /*0 = free*/;
  /** URLs routed through P2P without the header, as the daemon's proxy.rules; default DAEMON_STOCK_RULES. */
  rules?: RegExp[];
  /** Whose task id rule the emulated daemon follows; default DEFAULT_TASK_ID_RULE (client 1.4.2). */
  daemonVersion?: TaskIdRule;
  /**
   * Not a peer daemon but a plain forward proxy: nothing goes through P2P, whatever the rules and headers (a
   * baseline for direct downloads of a client that always sends X-Dragonfly-Use-P2P, like the plugin).
   */
  forwardOnly?: boolean;
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

type Source = 'origin' | 'parent';

type Fill =
  | { ok: true; entry: Entry; source: Source }
  | { ok: false; status: number; headers: Record<string, string>; body: Buffer; errorType: 'backend' };

/** The response of the request that starts a fill, which the fill answers itself while it downloads. */
interface Live {
  res: ServerResponse;
  /** Set by the fill once the source answered 200 and it took the response over. */
  started: boolean;
  /** Accounting of the request, run when the source is known and before any byte goes to the client. */
  onStart(source: Source): void;
}

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
/**
 * Write buffer of a cache file being filled. With fs.WriteStream's 16 KiB default nearly every chunk waits for its
 * own write, so the copy runs in lockstep with the disk writes and a cut-through client gets its bytes at that pace;
 * 4 MiB lets the copy read on while writes (coalesced by writev) are in flight. Bounded memory per fill.
 */
const FILL_FILE_BUFFER = 4 * 1024 * 1024;
/** Read size when serving a cached file: fewer reads, callbacks and socket writes than the 64 KiB default. */
const SERVE_READ_CHUNK = 1024 * 1024;

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

/**
 * A fill that failed reaching or reading its source. The daemon answers a backend error without a status code
 * with 500, type backend, and no body; the cause is kept for preheat()'s message only.
 */
function badGateway(what: string, cause: unknown): Fill {
  const body = Buffer.from(`${what}: ${cause instanceof Error ? cause.message : String(cause)}`);
  return { ok: false, status: 500, headers: {}, body, errorType: 'backend' };
}

/** Content type, etag, last-modified of an origin's (or parent's) answer, kept with the cached task. */
function entryMeta(h: Record<string, string>): Omit<Entry, 'size'> {
  const meta: Omit<Entry, 'size'> = {};
  if (h['content-type']) meta.contentType = h['content-type'];
  if (h['etag']) meta.etag = h['etag'];
  if (h['last-modified']) meta.lastModified = h['last-modified'];
  return meta;
}

/** The response headers of a task's metadata. */
function metaHeaders(meta: Omit<Entry, 'size'>): Record<string, string> {
  const h: Record<string, string> = {};
  if (meta.contentType) h['content-type'] = meta.contentType;
  if (meta.etag) h['etag'] = meta.etag;
  if (meta.lastModified) h['last-modified'] = meta.lastModified;
  return h;
}

/** Resolves when `w` can take more data again, or is gone (a client that disconnected never drains). */
function drained(w: Writable): Promise<void> {
  if (w.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      w.off('drain', done);
      w.off('close', done);
      resolve();
    };
    w.on('drain', done);
    w.on('close', done);
  });
}

/**
 * Copies `src` to `file` and to the live `client` at the same time, waiting while either is full (backpressure of
 * both sinks; the source is not read meanwhile). When `length` is known the client's last byte is held back and
 * returned: with it the client would hold its whole body and could ask again before the task is committed.
 * Without a length nothing is held: the client sees the end only at the chunked terminator, sent by end().
 */
async function copyThrough(
  src: Readable,
  file: WriteStream,
  client: ServerResponse | undefined,
  length: number | undefined,
  onBytes: (n: number) => void,
): Promise<{ size: number; held: Buffer | undefined }> {
  let size = 0;
  let held: Buffer | undefined;
  for await (const chunk of src as AsyncIterable<Buffer>) {
    if (file.errored) throw file.errored;
    size += chunk.length;
    onBytes(chunk.length);
    const waits: Promise<void>[] = [];
    if (!file.write(chunk)) waits.push(drained(file));
    let out = chunk;
    if (size === length) {
      held = chunk.subarray(-1);
      out = chunk.subarray(0, -1);
    }
    // A client that went away no longer gets bytes; the fill goes on for the cache and the requests joining it.
    if (client && !client.destroyed && out.length > 0 && !client.write(out)) waits.push(drained(client));
    if (waits.length > 0) await Promise.all(waits);
  }
  return { size, held };
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
  const rules = opts.rules ?? DAEMON_STOCK_RULES;
  const rule = opts.daemonVersion ?? DEFAULT_TASK_ID_RULE;
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

  /** Sends the headers of a cut-through answer; the body follows as the fill downloads it. */
  function startLive(
    live: Live,
    id: string,
    source: Source,
    meta: Omit<Entry, 'size'>,
    length: number | undefined,
  ): void {
    live.onStart(source);
    live.started = true;
    const headers: Record<string, string | number> = {
      [TASK_ID_HEADER]: id,
      [SERVER_IP_HEADER]: host,
      'accept-ranges': 'bytes',
      ...metaHeaders(meta),
    };
    // No length: Node answers chunked. Headers go out with the first byte, so an empty body cannot complete
    // before the commit.
    if (length !== undefined) headers['content-length'] = length;
    live.res.writeHead(200, headers);
  }

  /**
   * Downloads a 200 answer of the origin or the parent into the cache file and, when the fill has a `live` client,
   * to it at the same time. The client's last byte is written only after the commit, so a request made once a
   * client holds its whole body finds the task (a local hit). A failure mid-body destroys the client's connection
   * (it sees a truncated body), removes the partial file and fails the fill with a 502 for the requests joining it.
   */
  async function download(
    id: string,
    source: Source,
    upstream: Dispatcher.ResponseData,
    gen: number,
    live: Live | undefined,
  ): Promise<Fill> {
    const h = undiciHeaders(upstream.headers);
    const meta = entryMeta(h);
    const length = h['content-length'] === undefined ? undefined : Number(h['content-length']);
    if (live) startLive(live, id, source, meta, length);
    const client = live?.res;
    const tmp = join(cacheDir, `${id}.${randomUUID()}.part`);
    const file = createWriteStream(tmp, { highWaterMark: FILL_FILE_BUFFER });
    file.on('error', () => {}); // seen through file.errored in copyThrough() and by finished() below
    const onBytes = source === 'origin' ? (n: number) => (stats.originBytes += n) : () => {};
    try {
      const { size, held } = await copyThrough(upstream.body, file, client, length, onBytes);
      file.end();
      await finished(file); // flushed and closed (or the write error)
      const entry = await commit(id, tmp, { size, ...meta }, gen);
      if (client && !client.destroyed) client.end(held);
      return { ok: true, entry, source };
    } catch (e) {
      client?.destroy();
      file.destroy();
      await unlink(tmp).catch(() => {});
      return badGateway(`${source} download failed`, e);
    }
  }

  /** Task `id` from the parent peer; undefined when there is none or it does not hold the task (go to the origin). */
  async function fetchFromParent(id: string, gen: number, live: Live | undefined): Promise<Fill | undefined> {
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
    return download(id, 'parent', res, gen, live);
  }

  async function fetchFromOrigin(
    id: string,
    url: string,
    headers: Record<string, string>,
    gen: number,
    live: Live | undefined,
  ): Promise<Fill> {
    stats.originRequests++;
    let res: Dispatcher.ResponseData;
    try {
      const fwd = forwardableHeaders(headers);
      delete fwd['range']; // a cache fill fetches the whole object
      res = await undiciRequest(url, { method: 'GET', headers: fwd, dispatcher: agent });
    } catch (e) {
      return badGateway('origin unreachable', e);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) {
      const chunks: Buffer[] = [];
      let total = 0;
      for await (const chunk of res.body) {
        const b = chunk as Buffer;
        stats.originBytes += b.length;
        if (total < MAX_ERROR_BODY) chunks.push(b);
        total += b.length;
      }
      const h = undiciHeaders(res.headers);
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
    return download(id, 'origin', res, gen, live);
  }

  /**
   * Makes task `id` available locally: parent first, then origin. Single flight per task id: a caller that finds
   * the fill running gets its result, and its `live` response is left alone (`started` stays false).
   */
  function fill(id: string, url: string, headers: Record<string, string>, live?: Live): Promise<Fill> {
    const running = fills.get(id);
    if (running) return running;
    const gen = generation;
    const p = (async (): Promise<Fill> => {
      const fromParent = await fetchFromParent(id, gen, live);
      if (fromParent) return fromParent;
      return fetchFromOrigin(id, url, headers, gen, live);
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
      [SERVER_IP_HEADER]: host,
      'accept-ranges': 'bytes',
      ...extra,
      ...metaHeaders(entry),
    };
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
    const stream = createReadStream(dataPath(id), {
      highWaterMark: SERVE_READ_CHUNK,
      ...(range ? { start: range.start, end: range.end } : {}),
    });
    return pipeline(stream, res).catch(() => {
      res.destroy();
    });
  }

  /**
   * The daemon's make_error_response: the status, the origin's headers for a backend error, the error type, and an
   * EMPTY body whatever went wrong (so a client never sees an object store's XML error).
   */
  function sendError(
    res: ServerResponse,
    status: number,
    errorType: 'backend' | 'proxy' | 'dfdaemon',
    headers: Record<string, string> = {},
  ): void {
    res.writeHead(status, { ...headers, [ERROR_TYPE_HEADER]: errorType, 'content-length': 0 });
    res.end();
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
    } catch {
      // The daemon's direct proxy answers a failed forward with a 502 of its own.
      record.status = 502;
      sendError(res, 502, 'proxy');
      return;
    }
    record.status = upstream.statusCode;
    // Forwarded as it is, error bodies included: only P2P downloads lose them.
    const headers = forwardableHeaders(undiciHeaders(upstream.headers));
    res.writeHead(upstream.statusCode, headers);
    await pipeline(
      upstream.body,
      counter((n) => (stats.originBytes += n)),
      res,
    ).catch(() => res.destroy());
  }

  /** Accounting of a P2P request served by a fill (not a local hit). */
  function countFilled(record: RecordedRequest, source: Source): void {
    if (source === 'parent') {
      stats.cacheHits++;
      stats.remoteHits++;
      record.cacheHit = true;
    } else {
      stats.cacheMisses++;
    }
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
      sendError(res, record.status, injected);
      return;
    }

    // The daemon matches its rules against the URL without query and fragment, and the header case-insensitively.
    const bare = url.replace(/[?#].*$/, '');
    const viaP2P =
      !opts.forwardOnly &&
      req.method === 'GET' &&
      (headers[USE_P2P_HEADER.toLowerCase()]?.toLowerCase() === 'true' || rules.some((r) => r.test(bare)));
    if (!viaP2P) {
      await forwardDirect(req, res, record);
      return;
    }

    let id: string;
    try {
      // Client 1.4 reads only X-Dragonfly-Filtered-Query-Params; the legacy Go daemon's header is ignored.
      const { [LEGACY_FILTER_HEADER.toLowerCase()]: _legacy, ...current } = headers;
      id = computeTaskID({ ...identityFromHeaders(url, current, defaultFilter), rule });
    } catch {
      record.status = 500;
      sendError(res, 500, 'proxy');
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

    // A plain GET that starts the fill is answered by it as the bytes arrive (cut-through). Range and HEAD requests
    // wait for the commit and are served from the file: simpler, and the range needs no origin range request.
    const live: Live | undefined =
      req.method === 'GET' && req.headers['range'] === undefined
        ? {
            res,
            started: false,
            onStart: (source) => {
              countFilled(record, source);
              record.status = 200;
            },
          }
        : undefined;
    const result = await fill(id, url, headers, live);
    // Answered by the fill: body streamed, or connection destroyed by a failure mid-body (counted at the start).
    if (live?.started) return;
    if (!result.ok) {
      stats.cacheMisses++;
      record.status = result.status;
      sendError(res, result.status, result.errorType, result.headers);
      return;
    }
    // Joined a running fill (or Range/HEAD): counted by the fill's source like the request that started it, a miss
    // from the origin or a remote hit from the parent, although it caused no transfer of its own.
    countFilled(record, result.source);
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
    work.catch(() => {
      if (!res.headersSent) sendError(res, 500, 'dfdaemon');
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
        rule,
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
