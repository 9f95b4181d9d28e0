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

/** {@link readBounded} as bytes: an SDK that parses its own answers (XML) takes them so. */
export async function readBoundedBytes(
  body: AsyncIterable<unknown> & { destroy(): unknown },
  maxBytes: number,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    size += buf.length;
    if (size > maxBytes) {
      body.destroy();
      throw new ResponseTooLargeError(maxBytes);
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

/**
 * The first `maxBytes` of a body, the rest left unread (the stream destroyed): for an error answer, whose text only
 * ever feeds a message, so a server cannot make the reader hold more than that however much it sends.
 */
export async function readPrefix(
  body: AsyncIterable<unknown> & { destroy(): unknown },
  maxBytes: number,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
    chunks.push(buf.subarray(0, maxBytes - size));
    size += Math.min(buf.length, maxBytes - size);
    if (size >= maxBytes) {
      body.destroy();
      break;
    }
  }
  return Buffer.concat(chunks);
}

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
