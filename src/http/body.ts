/**
 * Response bodies: read with a size bound (a misbehaving server or a wrong address must not fill the operator's
 * memory), and checked against a zod schema with a short description of what did not fit.
 */
import type { Dispatcher } from 'undici';
import type { z } from 'zod';
import { RESPONSE_TOO_LARGE } from './classify.ts';

/** Default bound of a response body: far above any answer of either API (a job with its task lists, a page). */
export const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

/**
 * How much of an error answer (any status but 2xx) is read: its text only ever feeds a message that keeps 1 KiB, so
 * a server cannot make a client hold, parse or redact more than this however much it sends.
 */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

/** A body over its bound. The stream is destroyed when this is thrown, so the connection is not reused. */
export class ResponseTooLargeError extends Error {
  readonly code = RESPONSE_TOO_LARGE;
  readonly maxBytes: number;
  constructor(maxBytes: number) {
    super(`response larger than ${maxBytes} bytes`);
    this.name = 'ResponseTooLargeError';
    this.maxBytes = maxBytes;
  }
}

/**
 * The body as UTF-8 text, at most `maxBytes` of it. Counted as it streams (not from `content-length`, which a
 * chunked answer does not have and a broken one may understate).
 */
export async function readBounded(body: Dispatcher.ResponseData['body'], maxBytes: number): Promise<string> {
  return (await readBoundedBytes(body, maxBytes)).toString('utf8');
}

export type BodyStream = AsyncIterable<unknown> & { destroy(): unknown };

/**
 * At most `maxBytes` of a body; past them, `refuse` throws {@link ResponseTooLargeError} and `cut` keeps the first
 * `maxBytes`. Either way the rest is never read: the stream is destroyed.
 */
async function collect(body: BodyStream, maxBytes: number, past: 'refuse' | 'cut'): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    if (size + buf.length > maxBytes) {
      body.destroy();
      if (past === 'refuse') throw new ResponseTooLargeError(maxBytes);
      chunks.push(buf.subarray(0, maxBytes - size));
      break;
    }
    size += buf.length;
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

/** {@link readBounded} as bytes: an SDK that parses its own answers (XML) takes them so. */
export const readBoundedBytes = (body: BodyStream, maxBytes: number): Promise<Buffer> =>
  collect(body, maxBytes, 'refuse');

/**
 * The first `maxBytes` of a body, the rest left unread: for an error answer, whose text only ever feeds a message,
 * so a server cannot make the reader hold more than that however much it sends.
 */
export const readPrefix = (body: BodyStream, maxBytes: number): Promise<Buffer> =>
  collect(body, maxBytes, 'cut');

export type ParsedBody<T> = { ok: true; data: T } | { ok: false; problem: string };

/** `text` as JSON checked by `schema`; when it is not, what is wrong (the first issue and where), for an error. */
export function parseBody<S extends z.ZodType>(text: string, schema: S): ParsedBody<z.output<S>> {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, problem: 'body is not JSON' };
  }
  const parsed = schema.safeParse(json);
  if (parsed.success) return { ok: true, data: parsed.data };
  const issue = parsed.error.issues[0];
  const where = issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'schema mismatch';
  return { ok: false, problem: `unexpected body (${where})` };
}
