/**
 * The peer-proxy emulator's header, range and stream helpers: what is forwarded, a task's metadata headers, the
 * daemon's backend error, the cut-through copy of a fill to its cache file and its first client.
 */
import type { WriteStream } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Transform, type Readable, type Writable } from 'node:stream';
import type { Entry, Fill } from './peer-proxy-types.ts';

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

export function flatHeaders(h: IncomingMessage['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

export function forwardableHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) {
    const key = k.toLowerCase();
    if (HOP_BY_HOP.has(key) || key.startsWith('x-dragonfly-')) continue;
    out[key] = v;
  }
  return out;
}

export function undiciHeaders(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  return out;
}

/** Counts bytes flowing through (origin bandwidth). */
export function counter(onBytes: (n: number) => void): Transform {
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
export function badGateway(what: string, cause: unknown): Fill {
  const body = Buffer.from(`${what}: ${cause instanceof Error ? cause.message : String(cause)}`);
  return { ok: false, status: 500, headers: {}, body, errorType: 'backend' };
}

/** Content type, etag, last-modified of an origin's (or parent's) answer, kept with the cached task. */
export function entryMeta(h: Record<string, string>): Omit<Entry, 'size'> {
  const meta: Omit<Entry, 'size'> = {};
  if (h['content-type']) meta.contentType = h['content-type'];
  if (h['etag']) meta.etag = h['etag'];
  if (h['last-modified']) meta.lastModified = h['last-modified'];
  return meta;
}

/** The response headers of a task's metadata. */
export function metaHeaders(meta: Omit<Entry, 'size'>): Record<string, string> {
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
export async function copyThrough(
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

/**
 * The one range of a `Range: bytes=a-b | a- | -n` header within `size`: undefined when absent or not of that form
 * (serve the whole body), 'invalid' when it cannot be satisfied (416).
 */
export function rangeOf(
  header: string | undefined,
  size: number,
): { start: number; end: number } | 'invalid' | undefined {
  const m = header ? /^bytes=(\d*)-(\d*)$/.exec(header.trim()) : null;
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
  return start > end || start >= size ? 'invalid' : { start, end };
}

/** rangeOf without the distinction: a range to serve, or undefined (the whole body). */
export function parseRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | undefined {
  const r = rangeOf(header, size);
  return r === 'invalid' ? undefined : r;
}
