/**
 * Peer-proxy emulator: an HTTP forward proxy that behaves like the P2P peer daemon's proxy on :4001, for tests and
 * local development.
 *
 * As the real daemon (dragonfly-client 1.4.2, dragonfly-client/src/proxy/mod.rs) does:
 * - Absolute-form requests (`GET http://origin/x HTTP/1.1`). Only GET requests whose URL (without query and
 *   fragment) matches one of `rules` (the daemon's `proxy.rules`; default its stock `blobs/sha256.*`) or that carry
 *   `X-Dragonfly-Use-P2P: true` go "through P2P"; HEAD and every other request are forwarded directly, uncached.
 *   Task id from src/storage/taskid.ts under `daemonVersion`'s rule (default 1.4) with the request's
 *   `X-Dragonfly-Filtered-Query-Params` (else `defaultFilter`; the legacy `X-Dragonfly-Filter` is ignored),
 *   `X-Dragonfly-Tag`, `-Application`, `-Piece-Length`; content cached ON DISK by task id.
 * - Back-to-source follows redirects and drops `Authorization` on the way to another origin (the daemon's reqwest
 *   backend does both), so a Hub LFS file's task is keyed on its `resolve` URL and filled from the CDN.
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
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
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
} from '../../src/storage/taskid.ts';
import { createTaskStore } from './peer-proxy-cache.ts';
import { counter, flatHeaders, forwardableHeaders, parseRange, undiciHeaders } from './peer-proxy-http.ts';
import {
  DAEMON_STOCK_RULES,
  PeerProxyError,
  newStats,
  type Live,
  type PeerFailureMode,
  type PeerProxy,
  type PeerProxyOptions,
  type PreheatOptions,
  type RecordedRequest,
  type Source,
} from './peer-proxy-types.ts';

// The options and public shape are in peer-proxy-types.ts, the header and stream helpers in -http.ts, the cache
// and its fills in -cache.ts; this file is the proxy's server and its routes.
export { DAEMON_STOCK_RULES, PeerProxyError } from './peer-proxy-types.ts';
export type {
  PeerFailureMode,
  PeerProxy,
  PeerProxyOptions,
  PeerProxyStats,
  PreheatOptions,
  RecordedRequest,
} from './peer-proxy-types.ts';

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
  const failures: PeerFailureMode[] = [];
  let preheatFailures = 0;
  // The cache on disk and the fills: peer-proxy-cache.ts.
  const {
    index,
    dataPath,
    metaPath,
    lookup,
    loadFromDisk,
    fill,
    sendEntry,
    clear: clearTasks,
  } = createTaskStore({ host, parent, cacheDir, agent, stats });

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
      clearTasks();
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
