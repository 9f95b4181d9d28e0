/**
 * Response bodies: read with a size bound (a misbehaving server or a wrong address must not fill the operator's
 * memory), and checked against a zod schema with a short description of what did not fit.
 */
import type { Dispatcher } from 'undici';
import type { z } from 'zod';
import { RESPONSE_TOO_LARGE } from './classify.ts';

/** Default bound of a response body: far above any answer of either API (a job with its task lists, a page). */
export const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

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
  return Buffer.concat(chunks).toString('utf8');
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
