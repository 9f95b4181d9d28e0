/**
 * The manager emulator's HTTP conventions, as the real manager's gin handlers have them: the error a handler
 * throws (status, body, headers), Go's texts for a body that is not JSON and for a failed validation tag, and the
 * request body read. Used by every route of test/support/manager-emulator.ts.
 */
import type { IncomingMessage } from 'node:http';

export class HttpError extends Error {
  readonly status: number;
  readonly body: unknown;
  readonly text: boolean;
  /** `body` is the exact JSON text to send (e.g. two objects back to back), with a JSON content type. */
  readonly raw: boolean;
  readonly headers: Record<string, string>;
  constructor(
    status: number,
    body: unknown,
    opts: { text?: boolean; raw?: boolean; headers?: Record<string, string> } = {},
  ) {
    super(typeof body === 'string' ? body : JSON.stringify(body));
    this.status = status;
    this.body = body;
    this.text = opts.text ?? false;
    this.raw = opts.raw ?? false;
    this.headers = opts.headers ?? {};
  }
}

/** Go's encoding/json error text for a body that is not JSON (what gin's binding answers). */
export function goJSONError(body: string, e: unknown): string {
  if (body.trim() === '' || /end of (JSON )?input|Unterminated|Expected .* after/i.test(String(e))) {
    return body.trim() === '' ? 'EOF' : 'unexpected EOF';
  }
  const bad = /position (\d+)/.exec(String(e));
  const ch = bad ? body[Number(bad[1])] : body.trim()[0];
  return `invalid character '${ch ?? '?'}' looking for beginning of value`;
}

export const unauthorized = () => new HttpError(401, { message: 'Unauthorized' });
export const JWT_CHALLENGE = { 'www-authenticate': 'JWT realm=Dragonfly' };
/** gin's validator text for a failed binding tag. */
export const validation = (struct: string, field: string, tag: string) =>
  new HttpError(422, {
    errors: `Key: '${struct}.${field}' Error:Field validation for '${field}' failed on the '${tag}' tag`,
  });

export async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Runs `fn` over `items` with at most `limit` at once. */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return out;
}

/** Whether a decoded JSON value is an object (Go's struct or map), not an array or null. */
export const isObj = (v: unknown): v is Record<string, unknown> =>
  !!v && typeof v === 'object' && !Array.isArray(v);

/** Go's encoding/json text for a field of the wrong type (what gin's binding answers, 422). */
export const typeError = (field: string, goType: string, got: unknown) =>
  new HttpError(422, {
    errors: `json: cannot unmarshal ${Array.isArray(got) ? 'array' : typeof got} into Go struct field ${field} of type ${goType}`,
  });
