/**
 * The peer-proxy emulator's tasks: the cache on disk by task id and the fills that make a task available (parent
 * first, then origin; single flight per task id; cut-through to the request that starts one), and serving a
 * cached task. One store per proxy instance, created by startPeerProxy() (peer-proxy.ts).
 */
import { createReadStream, createWriteStream, existsSync, rmSync } from 'node:fs';
import { readFile, rename, unlink, writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { finished, pipeline } from 'node:stream/promises';
import { randomUUID } from 'node:crypto';
import { interceptors, request as undiciRequest, type Agent, type Dispatcher } from 'undici';
import { TASK_ID_HEADER } from '../../src/storage/taskid.ts';
import {
  badGateway,
  copyThrough,
  entryMeta,
  forwardableHeaders,
  metaHeaders,
  parseRange,
  undiciHeaders,
} from './peer-proxy-http.ts';
import type { Entry, Fill, Live, PeerProxyStats, Source } from './peer-proxy-types.ts';

const SERVER_IP_HEADER = 'X-Dragonfly-Server-IP';

const MAX_ERROR_BODY = 64 * 1024;
/**
 * Write buffer of a cache file being filled. With fs.WriteStream's 16 KiB default nearly every chunk waits for its
 * own write, so the copy runs in lockstep with the disk writes and a cut-through client gets its bytes at that pace;
 * 4 MiB lets the copy read on while writes (coalesced by writev) are in flight. Bounded memory per fill.
 */
const FILL_FILE_BUFFER = 4 * 1024 * 1024;
/** Read size when serving a cached file: fewer reads, callbacks and socket writes than the 64 KiB default. */
const SERVE_READ_CHUNK = 1024 * 1024;

/** What the task store shares with the proxy around it. */
export interface TaskStoreOptions {
  host: string;
  parent: string | undefined;
  cacheDir: string;
  agent: Agent;
  stats: PeerProxyStats;
}

export interface TaskStore {
  /** Tasks known to this instance (loaded or committed), by task id. */
  index: Map<string, Entry>;
  dataPath(id: string): string;
  metaPath(id: string): string;
  lookup(id: string): Entry | undefined;
  loadFromDisk(id: string): Promise<Entry | undefined>;
  fill(id: string, url: string, headers: Record<string, string>, live?: Live): Promise<Fill>;
  sendEntry(
    req: IncomingMessage,
    res: ServerResponse,
    id: string,
    entry: Entry,
    extra: Record<string, string>,
  ): Promise<void>;
  /** For reset(): removes every task and forgets the fills under way (their results are dropped, not committed). */
  clear(): void;
}

export function createTaskStore({ host, parent, cacheDir, agent, stats }: TaskStoreOptions): TaskStore {
  // Back-to-source follows redirects (the daemon's policy sets no bound; 10 here), dropping Authorization on the way to another
  // origin, as the daemon's HTTP backend does: a Hub LFS file's 302 to its signed CDN URL is followed there.
  const origin = agent.compose(interceptors.redirect({ maxRedirections: 10 }));
  const index = new Map<string, Entry>();
  const fills = new Map<string, Promise<Fill>>();
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
      res = await undiciRequest(url, { method: 'GET', headers: fwd, dispatcher: origin });
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

  function clear(): void {
    generation++;
    for (const id of index.keys()) {
      rmSync(dataPath(id), { force: true });
      rmSync(metaPath(id), { force: true });
    }
    index.clear();
    fills.clear();
  }

  return { index, dataPath, metaPath, lookup, loadFromDisk, fill, sendEntry, clear };
}
