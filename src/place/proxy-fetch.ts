/**
 * One file through the node's peer proxy: an absolute-form `GET <signed url>` sent to the proxy (undici accepts an
 * absolute URL as the request path, which is exactly a forward proxy's request line; its ProxyAgent would tunnel
 * https:// targets with CONNECT and hide the URL and the X-Dragonfly-* headers from the daemon), streamed into the
 * target file with its size checked.
 *
 * With a hard-link directory it first asks the daemon to place its own copy as a hard link
 * (`X-Dragonfly-Output-Path` + `X-Dragonfly-Force-Hard-Link: true`, honoured by the proxy of dragonfly-client
 * 1.4+), exactly as the TorchServe plugin does, when the linked file has the announced size:
 *   - on a local hit (`X-Dragonfly-Task-Download-Finished: true`) the link is the file, and the body is not read;
 *   - for a task the daemon does not hold yet it links the file it has only allocated and fills it as the download
 *     goes: the body is read whole without being written ({@link LinkedBody}), and the link is the file when the
 *     body's sampled blocks match it; otherwise the link is removed and the file downloaded again without one.
 * A refusal of the daemon's own (500 with an error type other than `backend`: a cross-device link, say) is followed
 * by the plain download. A link the model server could write (read-only-link.ts) is never kept, nor asked for
 * when the server's uid already rules it out: the file is copied instead.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { lstat, mkdir, rename, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Dispatcher } from 'undici';
import { redact } from '../redact.ts';
import { LinkedBody } from './linked-body.ts';
import { linkProblem, serverProblem } from './read-only-link.ts';
import {
  DOWNLOAD_FINISHED_HEADER,
  ERROR_TYPE_HEADER,
  TASK_ID_HEADER,
  USE_P2P_HEADER,
} from '../storage/taskid.ts';
import { USER_AGENT } from '../version.ts';

export const OUTPUT_PATH_HEADER = 'X-Dragonfly-Output-Path';
export const FORCE_HARD_LINK_HEADER = 'X-Dragonfly-Force-Hard-Link';

export interface FetchFileRequest {
  dispatcher: Dispatcher;
  /** `http://host:port` of the peer proxy. */
  proxy: string;
  /** The (signed) URL; never logged or reported as it is. */
  url: string;
  /** The task identity headers and any extra ones. */
  headers: Record<string, string>;
  /** The file to create (its directory is created). */
  target: string;
  /** The size the caller expects, when known. */
  expectedSize?: number | undefined;
  /**
   * Ask the daemon for a hard link: `local` is where it appears here, `daemon` the same directory as it sees it,
   * `serverUid` the uid the model server runs as (read-only-link.ts: a link it could write is never kept).
   */
  hardLink?: { local: string; daemon: string; serverUid: number | undefined } | undefined;
  signal: AbortSignal;
  /** Called for every chunk received; throwing stops the download (a byte budget). Negative: bytes given back
   *  (a daemon's file received through a link that was then removed). */
  onBytes: (n: number) => void;
  /** How the file is named in messages (its path in the model, never the URL). */
  what: string;
  /** Called before a body the daemon cut is asked for again (why, and the attempt about to start). */
  onRetry?: ((why: string, attempt: number) => void) | undefined;
  /**
   * Hash the body with sha256 as it arrives (result.sha256), so a caller that checks a digest need not read the
   * file back. Only a body read whole is hashed: a local hit's link is taken without reading it.
   */
  sha256?: boolean | undefined;
}

export interface FetchFileResult {
  bytes: number;
  /** `X-Dragonfly-Task-ID`: absent when the download did not go through P2P. */
  taskID?: string | undefined;
  /** true: served from this node's daemon storage; false: through P2P from elsewhere; absent: not through P2P. */
  localHit?: boolean | undefined;
  /** true: the file is a hard link of the daemon's copy; false: asked for but streamed. */
  hardLink?: boolean | undefined;
  hardLinkFallback?: string | undefined;
  /** `sha256:<hex>` of the body, when asked for and the body was read whole (absent on a local hit's link). */
  sha256?: string | undefined;
}

/**
 * How a fetched file is logged at debug level: what the fetch did, how long the fetch took (`asked` → `fetched`,
 * performance.now() times) and how long its check after it took (→ now).
 */
export function fetchLogFields(r: FetchFileResult, asked: number, fetched: number) {
  return {
    bytes: r.bytes,
    localHit: r.localHit,
    hardLink: r.hardLink,
    fetchMs: Math.round(fetched - asked),
    checkMs: Math.round(performance.now() - fetched),
  };
}

/** A download that failed; the message names the file and never holds a URL's query values. */
export class FetchError extends Error {
  readonly status: number;
  readonly errorType: string | undefined;
  /** The daemon answered 200 and then stopped the body (closed the connection, or sent less than announced). */
  readonly cut: boolean;
  constructor(message: string, status = 0, errorType?: string, cut = false) {
    super(redact(message));
    this.name = 'FetchError';
    this.status = status;
    this.errorType = errorType;
    this.cut = cut;
  }
}

/**
 * How many times a cut body is asked for again. The daemon's proxy has already answered 200 when the download
 * task behind it fails (a parent's piece, a scheduling error, its own back-to-source read): it can only close the
 * connection. The pieces it finished stay in its storage, so asking again resumes the task rather than starting
 * over, as any HTTP client of a proxy retries a connection cut mid-body; a daemon that cuts every time still fails
 * the file.
 */
export const CUT_RETRIES = 2;

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name.toLowerCase()];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** Stops reading a body: the connection is closed (undici reports that as an error, which is expected here). */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => undefined);
  body.destroy();
}

/** Why a non-200 answer failed, in the storage's terms where the daemon's error type says it was the origin. */
function explain(status: number, errorType: string | undefined): string {
  if (errorType === 'backend') {
    if (status === 403)
      return 'the storage refused the signed URL (expired, or signed with wrong credentials)';
    if (status === 404) return 'the storage has no such object';
    return 'the storage answered with an error';
  }
  if (errorType) return `a ${errorType} error of the peer daemon (its log says why)`;
  return 'not an answer of the storage';
}

/** GETs `req.url` through the proxy into `req.target`, asking again when the daemon cuts the body. */
export async function fetchFile(req: FetchFileRequest): Promise<FetchFileResult> {
  for (let attempt = 1; ; attempt++) {
    let received = 0;
    const onBytes = (n: number) => {
      req.onBytes(n);
      received += n;
    };
    try {
      return await fetchFileOnce({ ...req, onBytes });
    } catch (e) {
      if (!(e instanceof FetchError) || !e.cut || attempt > CUT_RETRIES || req.signal.aborted) throw e;
      // The retry starts the file over: its bytes so far are given back and its partial copy removed.
      if (received > 0) req.onBytes(-received);
      await unlink(req.target).catch(() => undefined);
      req.onRetry?.(e.message, attempt + 1);
    }
  }
}

async function fetchFileOnce(req: FetchFileRequest): Promise<FetchFileResult> {
  if (!req.hardLink) return (await once(req, undefined)) as FetchFileResult; // without a link, never 'refused'
  // A server that could write any link: no link is asked for, so none ever appears where it could write it.
  const unsafe = serverProblem(req.hardLink.serverUid);
  if (unsafe !== undefined)
    return {
      ...((await once(req, undefined)) as FetchFileResult),
      hardLink: false,
      hardLinkFallback: unsafe,
    };
  const link = {
    local: join(req.hardLink.local, `.p2p-${randomUUID()}.link`),
    daemon: '',
    serverUid: req.hardLink.serverUid,
  };
  link.daemon = join(req.hardLink.daemon, link.local.slice(req.hardLink.local.length + 1));
  let fallback: string;
  try {
    const r = await once(req, link);
    if (r === 'refused') fallback = 'the peer daemon refused the hard link';
    else if ('retry' in r) fallback = r.retry;
    else return r;
  } finally {
    await unlink(link.local).catch(() => undefined);
  }
  const r = await once(req, undefined);
  return { ...(r as FetchFileResult), hardLink: false, hardLinkFallback: fallback };
}

/** The link was filled but is not the body: download again without it. */
interface Retry {
  retry: string;
}

/** The GET through the peer proxy (asking for the daemon's hard link when `link` is set), its answer checked: a
 *  refused link, or the open body with what its headers say. */
async function ask(
  req: FetchFileRequest,
  link: { daemon: string } | undefined,
): Promise<
  | 'refused'
  | {
      res: Dispatcher.ResponseData;
      taskID: string | undefined;
      localHit: boolean | undefined;
      errorType: string | undefined;
      announced: number | undefined;
    }
> {
  const target = new URL(req.url);
  const headers: Record<string, string> = {
    host: target.host,
    'user-agent': USER_AGENT,
    accept: '*/*',
    'accept-encoding': 'identity',
    // Whatever the daemon's proxy.rules: without it a stock daemon sends the download straight to the origin.
    [USE_P2P_HEADER]: 'true',
    ...req.headers,
  };
  if (link) {
    headers[OUTPUT_PATH_HEADER] = link.daemon;
    headers[FORCE_HARD_LINK_HEADER] = 'true';
  }
  let res: Dispatcher.ResponseData;
  try {
    res = await req.dispatcher.request({
      origin: req.proxy,
      path: req.url,
      method: 'GET',
      headers,
      signal: req.signal,
    });
  } catch (e) {
    if (req.signal.aborted) throw req.signal.reason ?? e;
    const code = (e as { code?: string }).code ?? (e as Error).message;
    throw new FetchError(`peer proxy at ${req.proxy} is unreachable for ${req.what}: ${code}`);
  }
  const taskID = header(res.headers, TASK_ID_HEADER);
  const finished = header(res.headers, DOWNLOAD_FINISHED_HEADER)?.trim().toLowerCase() === 'true';
  const localHit = finished ? true : taskID !== undefined ? false : undefined;
  const errorType = header(res.headers, ERROR_TYPE_HEADER);
  if (res.statusCode !== 200) {
    discard(res.body);
    if (link && errorType !== undefined && errorType.toLowerCase() !== 'backend') return 'refused';
    throw new FetchError(
      `download of ${req.what} through the peer proxy failed: HTTP ${res.statusCode}${errorType ? ` (${errorType} error)` : ''}: ${explain(res.statusCode, errorType)}`,
      res.statusCode,
      errorType,
    );
  }
  const lengthHeader = header(res.headers, 'content-length');
  const announced = lengthHeader !== undefined ? Number(lengthHeader) : undefined;
  if (announced !== undefined && req.expectedSize !== undefined && announced !== req.expectedSize) {
    discard(res.body);
    throw new FetchError(
      `${req.what}: the peer proxy announced ${announced} bytes, the file set says ${req.expectedSize}`,
      200,
    );
  }
  return { res, taskID, localHit, errorType, announced };
}

async function once(
  req: FetchFileRequest,
  link: { local: string; daemon: string; serverUid: number | undefined } | undefined,
): Promise<FetchFileResult | 'refused' | Retry> {
  const asked = await ask(req, link);
  if (asked === 'refused') return 'refused';
  const { res, taskID, localHit, errorType, announced } = asked;
  await mkdir(dirname(req.target), { recursive: true });

  let fallback: string | undefined;
  if (link) {
    const use = await linkUse(link.local, localHit, announced, link.serverUid);
    if (use === 'now') {
      // The body is not read: closing the connection ends it (client 1.4.2 only logs the failed send; the task
      // stays finished).
      discard(res.body);
      await rename(link.local, req.target);
      req.onBytes(announced!);
      return { bytes: announced!, taskID, localHit, hardLink: true };
    }
    if (use === 'after-body') {
      const linked = new LinkedBody(announced!);
      let at = 0;
      const keep = new Writable({
        write(chunk: Buffer, _enc, cb) {
          linked.keep(chunk, at);
          at += chunk.length;
          cb();
        },
      });
      const { sha256 } = await receive(req, res, announced, errorType, keep);
      const problem = await linked.mismatch(link.local);
      if (problem === undefined) {
        await rename(link.local, req.target);
        return { bytes: announced!, taskID, localHit, hardLink: true, sha256 };
      }
      req.onBytes(-announced!);
      return { retry: problem };
    }
    fallback = use.problem;
    await unlink(link.local).catch(() => undefined);
  }

  return {
    ...(await receive(req, res, announced, errorType, createWriteStream(req.target, { flags: 'wx' }))),
    taskID,
    localHit,
    ...(link ? { hardLink: false, hardLinkFallback: fallback } : {}),
  };
}

/**
 * Streams the body into `sink` (the target file, or nowhere for a linked file), counting it, and checks the size.
 * The target file is opened `wx`: the temporary directory is new, so an existing file is a second file of the
 * same path, refused.
 */
async function receive(
  req: FetchFileRequest,
  res: Dispatcher.ResponseData,
  announced: number | undefined,
  errorType: string | undefined,
  sink: Writable,
): Promise<{ bytes: number; sha256?: string | undefined }> {
  let bytes = 0;
  let stopped: unknown; // what onBytes threw: the caller's own error, passed on as it is
  // Hashed here, while the chunk is in memory anyway: a read-back of a 2 GiB artifact costs seconds after the
  // download instead of during it.
  const hash = req.sha256 ? createHash('sha256') : undefined;
  const count = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      bytes += chunk.length;
      try {
        req.onBytes(chunk.length);
        hash?.update(chunk);
        cb(null, chunk);
      } catch (e) {
        stopped = e;
        cb(e as Error);
      }
    },
  });
  try {
    await pipeline(res.body, count, sink, { signal: req.signal });
  } catch (e) {
    if (req.signal.aborted) throw req.signal.reason ?? e;
    if (stopped !== undefined) throw stopped;
    const code = (e as { code?: string }).code;
    const why = code ?? (e as Error).message;
    // undici's errors and a reset are the connection's; a write of ours that failed (a full disk) is not a cut.
    const cut = code !== undefined && (code.startsWith('UND_ERR_') || code === 'ECONNRESET');
    throw new FetchError(
      `download of ${req.what} failed after ${bytes} bytes: ${why}${cut ? ' (the peer daemon closed the connection; its log says why)' : ''}`,
      200,
      errorType,
      cut,
    );
  }
  const expected = announced ?? req.expectedSize;
  if (expected !== undefined && bytes !== expected)
    throw new FetchError(
      `download of ${req.what} was truncated: received ${bytes} of ${expected} bytes`,
      200,
      undefined,
      bytes < expected,
    );
  return { bytes, sha256: hash && `sha256:${hash.digest('hex')}` };
}

/**
 * How the daemon's link can be the file: at once (a local hit), once the body was read whole and matches it (a task
 * the daemon is filling as it sends), or not (why; the body is then streamed).
 */
async function linkUse(
  path: string,
  localHit: boolean | undefined,
  announced: number | undefined,
  serverUid: number | undefined,
): Promise<'now' | 'after-body' | { problem: string }> {
  if (localHit === undefined) return { problem: 'the peer proxy did not serve it through P2P' };
  if (announced === undefined)
    return { problem: 'the peer proxy sent no Content-Length to check the link against' };
  try {
    const st = await lstat(path);
    if (!st.isFile()) return { problem: `the daemon made no regular file at ${path}` };
    if (st.size !== announced)
      return { problem: `the daemon's file has ${st.size} bytes, the response announced ${announced}` };
    const problem = linkProblem(serverUid, st);
    if (problem !== undefined) return { problem };
  } catch {
    return {
      problem: `the daemon made no file at ${path} (a daemon that ignores ${OUTPUT_PATH_HEADER}, or the hard-link directory is not this model root)`,
    };
  }
  return localHit ? 'now' : 'after-body';
}
