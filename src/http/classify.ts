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

/**
 * A server's documented exception to the table: an answer of `status` (`5xx`: any of them; absent: any status)
 * whose text (the message or the exception type the client passes) matches `text` is of `kind`.
 */
export interface StatusException {
  status?: number | '5xx' | undefined;
  text?: RegExp | undefined;
  kind: HttpErrorKind;
}

function applies(e: StatusException, status: number, text: string): boolean {
  const statusMatches =
    e.status === undefined || (e.status === '5xx' ? status >= 500 && status < 600 : e.status === status);
  return statusMatches && (e.text === undefined || e.text.test(text));
}

/** The kind of an answer of `status`: the table above, unless one of the server's `exceptions` applies. */
export function kindForStatus(
  status: number,
  text = '',
  exceptions: readonly StatusException[] = [],
): HttpErrorKind {
  const exception = exceptions.find((e) => applies(e, status, text));
  if (exception) return exception.kind;
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
