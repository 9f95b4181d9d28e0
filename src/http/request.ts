/**
 * One HTTP exchange on undici, the same way for both clients: a time-out over the whole exchange (connect,
 * headers and body) composed with the caller's AbortSignal, the body read with a size bound (an error answer's cut
 * to its first {@link MAX_ERROR_BODY_BYTES}), and every transport
 * failure turned into the client's own {@link HttpError} (retryable: the request may succeed later as it is).
 *
 * A caller's abort is not a failure of the server: its reason is thrown as it is, so a caller that stops work
 * (shutdown, a deleted object) sees its own reason and no condition is written from it.
 */
import type { Dispatcher } from 'undici';
import {
  DEFAULT_MAX_RESPONSE_BYTES,
  MAX_ERROR_BODY_BYTES,
  ResponseTooLargeError,
  readBounded,
  readPrefix,
  type BodyStream,
} from './body.ts';
import { TIMEOUT, UNUSABLE_RESPONSE_KIND, transportCode } from './classify.ts';
import { boundDetail, type HttpError, type HttpErrorInit } from './errors.ts';
import { timerDelay } from '../runtime/timers.ts';
import { USER_AGENT } from '../version.ts';

export interface HttpRequest {
  dispatcher: Dispatcher;
  /** `http://host:port`: undici dispatches by origin. */
  origin: string;
  /** Path and query string. */
  path: string;
  method: Dispatcher.HttpMethod;
  headers: Record<string, string>;
  body?: string | undefined;
  /** Whole exchange, ms. */
  timeoutMs: number;
  /** The caller's: aborting it ends the exchange and rethrows its reason. */
  signal?: AbortSignal | undefined;
  /** Largest body read. Default {@link DEFAULT_MAX_RESPONSE_BYTES}. */
  maxResponseBytes?: number | undefined;
  /** Named in errors. */
  operation: string;
  /** Values to keep out of error messages (tokens the client holds). */
  secrets?: readonly string[] | undefined;
  /**
   * Reads the body instead of the bounds above: a source's resolution reads every answer through its budget
   * (src/http/budget.ts). `ok` is false for an answer that is not a 2xx (its text only feeds a message).
   */
  read?: ((body: BodyStream, ok: boolean) => Promise<string>) | undefined;
}

export interface HttpResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** Builds the client's error class (ManagerError, ModelServerError) from a failure's fields. */
export type ErrorFactory = (init: HttpErrorInit) => HttpError;

/** Any status is an answer (the client classifies it); only transport failures and aborts throw. */
export async function sendRequest(req: HttpRequest, toError: ErrorFactory): Promise<HttpResponse> {
  req.signal?.throwIfAborted();
  // Whole milliseconds within a Node timer's range: AbortSignal.timeout throws on 120000.5 and a timer longer than
  // 2^31-1 ms fires after 1 ms; 0 would mean "no time-out" to undici's own timers.
  const timeoutMs = Math.max(1, timerDelay(req.timeoutMs));
  // A timer of our own, cleared when the exchange ends: an AbortSignal.timeout (with the listener AbortSignal.any
  // puts on it) stays alive, timer and signals, until it fires, so every registration (30 min) kept both for half an
  // hour after it was answered: 2,000 of each in an operator idle after rolling out 1,000 ServedModels.
  const timeout = new AbortController();
  const timer = setTimeout(
    () => timeout.abort(new DOMException(`no complete answer within ${timeoutMs} ms`, 'TimeoutError')),
    timeoutMs,
  );
  const signal = req.signal ? AbortSignal.any([req.signal, timeout.signal]) : timeout.signal;
  const maxBytes = req.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  let status = 0;
  try {
    const res = await req.dispatcher.request({
      origin: req.origin,
      path: req.path,
      method: req.method,
      headers: req.headers,
      body: req.body ?? null,
      signal,
      // undici's own idle time-outs default to 300 s, below a long call's budget (a register downloads first).
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    status = res.statusCode;
    // An error answer is cut, not refused: its first bytes still say what went wrong.
    const ok = status >= 200 && status < 300;
    const text = req.read
      ? await req.read(res.body, ok)
      : ok
        ? await readBounded(res.body, maxBytes)
        : (await readPrefix(res.body, Math.min(maxBytes, MAX_ERROR_BODY_BYTES))).toString('utf8');
    return { status: res.statusCode, headers: res.headers, text };
  } catch (e) {
    if (req.signal?.aborted) throw req.signal.reason ?? e;
    if (e instanceof ResponseTooLargeError) {
      throw toError({
        kind: UNUSABLE_RESPONSE_KIND,
        status,
        operation: req.operation,
        detail: e.message,
        code: e.code,
        cause: e,
      });
    }
    const code = timeout.signal.aborted ? TIMEOUT : transportCode(e);
    const detail =
      code === TIMEOUT
        ? `no complete answer within ${timeoutMs} ms`
        : `request to ${req.origin} failed: ${e instanceof Error ? e.message : String(e)}`;
    throw toError({
      kind: 'retryable',
      status: 0,
      operation: req.operation,
      detail: boundDetail(detail, req.secrets),
      code,
      cause: e,
    });
  } finally {
    clearTimeout(timer);
  }
}

/** A header's value as one string (undici gives repeated headers as an array). */
export function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(', ') : v;
}

/** `?a=1&b=2` of the defined values; empty when there are none. */
export function queryString(q: Record<string, string | number | boolean | undefined> | undefined): string {
  if (!q) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined) params.append(k, String(v));
  const s = params.toString();
  return s === '' ? '' : `?${s}`;
}

/**
 * The headers of a JSON exchange with a model server or an agent, with `Authorization: Bearer` when `token` is
 * given. The token joins `secrets`, so no error of the exchange quotes it; a token that cannot be read rejects with
 * `noToken`'s error (an `auth` failure of the caller's kind).
 */
async function jsonHeaders(
  body: unknown,
  token: (() => Promise<string>) | undefined,
  secrets: string[],
  noToken: (message: string) => Error,
): Promise<Record<string, string>> {
  const headers: Record<string, string> = { 'user-agent': USER_AGENT, accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (!token) return headers;
  let value: string;
  try {
    value = await token();
  } catch (e) {
    throw noToken((e as Error).message ?? String(e));
  }
  if (!secrets.includes(value)) secrets.push(value);
  headers['authorization'] = `Bearer ${value}`;
  return headers;
}

/** A JSON endpoint of a model server or an agent, as its client holds it. */
export interface JsonEndpoint {
  dispatcher: Dispatcher;
  /** `http://host:port`. */
  origin: string;
  /** The bearer token's source; none, no `Authorization`. */
  token?: (() => Promise<string>) | undefined;
  /** The client's: a token read for the exchange joins it. */
  secrets: string[];
  /** The exchange's time-out when the call names none, ms. */
  timeoutMs: number;
}

/** The endpoint at `origin` of a client's options; `timeoutMs` applies when neither the options nor a call name one. */
export function jsonEndpoint(
  origin: string,
  opts: {
    dispatcher: Dispatcher;
    token?: (() => Promise<string>) | undefined;
    timeoutMs?: number | undefined;
  },
  secrets: string[],
  timeoutMs: number,
): JsonEndpoint {
  return {
    dispatcher: opts.dispatcher,
    origin,
    token: opts.token,
    secrets,
    timeoutMs: opts.timeoutMs ?? timeoutMs,
  };
}

/** One call of a JSON exchange: its body is serialized; `timeoutMs` and `signal` are the caller's. */
/** A JSON body its caller serialized already (to bound its size while building it): sent as it is. */
export class SerializedJSON {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

export interface JsonCall {
  operation: string;
  method: Dispatcher.HttpMethod;
  path: string;
  body?: unknown;
  timeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
  /** Largest body read (an error answer cut to it); default {@link DEFAULT_MAX_RESPONSE_BYTES}. */
  maxResponseBytes?: number | undefined;
}

/**
 * {@link jsonHeaders} and {@link sendRequest} for a JSON call: the clients of model servers and agents differ only
 * in their errors (`toError` for a transport failure, `noToken` for a token that cannot be read).
 */
export async function sendJSON(
  endpoint: JsonEndpoint,
  call: JsonCall,
  errors: { toError: ErrorFactory; noToken: (message: string) => Error },
): Promise<HttpResponse> {
  const headers = await jsonHeaders(call.body, endpoint.token, endpoint.secrets, errors.noToken);
  return sendRequest(
    {
      dispatcher: endpoint.dispatcher,
      origin: endpoint.origin,
      path: call.path,
      method: call.method,
      headers,
      body:
        call.body === undefined
          ? undefined
          : call.body instanceof SerializedJSON
            ? call.body.text
            : JSON.stringify(call.body),
      timeoutMs: call.timeoutMs ?? endpoint.timeoutMs,
      signal: call.signal,
      maxResponseBytes: call.maxResponseBytes,
      operation: call.operation,
      secrets: endpoint.secrets,
    },
    errors.toError,
  );
}
