/**
 * The one retry classification of both HTTP clients. A client may refine it only where its server's contract
 * says a status means something else (each such override is documented beside the client's error class).
 *
 * | outcome                                                   | kind        |
 * |-----------------------------------------------------------|-------------|
 * | network error, time-out (no status)                       | retryable   |
 * | 408, 429, 5xx                                             | retryable   |
 * | 401                                                       | auth        |
 * | 404                                                       | notFound    |
 * | 409                                                       | conflict    |
 * | any other 4xx, a redirect (not followed), a status the API never sends there | terminal |
 * | 2xx whose body is unusable (not JSON, wrong shape, over the size bound) | retryable |
 *
 * The last row is a choice: such a body is never the request's fault but the server's or something's in between
 * (an ingress default page while the backend restarts, a half-started server, a truncated answer, a server of
 * another version). `terminal` means "will not succeed until the input or the credentials change", and nothing
 * the user could change in a spec fixes a garbled answer, so it must not stop the retries: the controllers back
 * off (they honour `retryable`) and the condition names the problem meanwhile.
 */
import type { HttpErrorKind } from './errors.ts';

export function kindForStatus(status: number): HttpErrorKind {
  if (status === 401) return 'auth';
  if (status === 404) return 'notFound';
  if (status === 409) return 'conflict';
  if (status === 408 || status === 429 || status >= 500) return 'retryable';
  // A redirect means the configured address is not the API's (an http -> https ingress): fix the address.
  return 'terminal';
}

/** Kind of a 2xx answer whose body the client cannot use; see the table above for why it is retryable. */
export const UNUSABLE_RESPONSE_KIND: HttpErrorKind = 'retryable';

/** Code of an error for an unusable 2xx body. */
export const INVALID_RESPONSE = 'INVALID_RESPONSE';
/** Code of an error for a body over the client's size bound. */
export const RESPONSE_TOO_LARGE = 'RESPONSE_TOO_LARGE';
/** Code of an error for a request that got no complete answer in time. */
export const TIMEOUT = 'TIMEOUT';

/** The transport code of a network failure (undici / Node): `ECONNREFUSED`, `TIMEOUT`, ...; `NETWORK` if none. */
export function transportCode(e: unknown): string {
  let cur: unknown = e;
  for (let depth = 0; depth < 4 && cur && typeof cur === 'object'; depth++) {
    const o = cur as { code?: unknown; name?: unknown; cause?: unknown };
    if (o.name === 'TimeoutError') return TIMEOUT;
    if (typeof o.code === 'string') {
      return o.code === 'UND_ERR_HEADERS_TIMEOUT' || o.code === 'UND_ERR_BODY_TIMEOUT' ? TIMEOUT : o.code;
    }
    if (o.cause === cur) break;
    cur = o.cause;
  }
  return 'NETWORK';
}

/** Network failures that happen before a request leaves: the server cannot have acted on it. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

/**
 * Whether a retryable failure of a request may be repeated as it is. Reads may always be; a POST (not idempotent)
 * only when the server surely did not act on it: it refused by rate limit (429), or the request never left.
 */
export function safeToRepeat(
  method: string,
  failure: { status: number; code?: string | undefined },
): boolean {
  if (method !== 'POST') return true;
  return failure.status === 429 || NOT_SENT.has(failure.code ?? '');
}
