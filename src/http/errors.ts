/**
 * The one error base of peerload's HTTP clients (the P2P manager's job API, the model servers' management API).
 * Every failure of either client is an {@link HttpError} subclass with a `kind` the controllers act on; they map
 * `kind` to conditions and never look at sockets or bodies.
 *
 * The message never carries a credential: request headers and bodies are never quoted, and whatever the server
 * says passes the redaction boundary (src/redact.ts) before it is kept.
 */
import { redact, redactBounded } from '../redact.ts';

export const HTTP_ERROR_KINDS = ['retryable', 'terminal', 'auth', 'notFound', 'conflict'] as const;
export type HttpErrorKind = (typeof HTTP_ERROR_KINDS)[number];

export interface HttpErrorInit {
  kind: HttpErrorKind;
  /** HTTP status; 0 for network errors and time-outs. */
  status: number;
  /** What the client was doing, e.g. `create preheat job`, `describe resnet`. */
  operation: string;
  /** The server's own message (bounded and redacted, see {@link boundDetail}) or a description of the failure. */
  detail: string;
  /** From `Retry-After` (429/503), in milliseconds. */
  retryAfterMs?: number | undefined;
  /** A transport code (ECONNREFUSED, `TIMEOUT`, `RESPONSE_TOO_LARGE`) or the client's own (`INVALID_RESPONSE`). */
  code?: string | undefined;
  /**
   * What the message says in place of the status for a failure that is neither an answer's status nor a transport
   * error: a download the agent reports as failed in an answer that itself succeeded (`reported by the agent`).
   */
  where?: string | undefined;
  cause?: unknown;
}

export class HttpError extends Error {
  readonly kind: HttpErrorKind;
  readonly status: number;
  readonly operation: string;
  readonly detail: string;
  readonly retryAfterMs: number | undefined;
  readonly code: string | undefined;

  /**
   * @param subject who failed, first words of the message (`manager`, `model server http://10.0.0.7:8081`)
   * @param shown the detail as the message shows it, when it says more than `init.detail` (a server exception type)
   */
  constructor(subject: string, init: HttpErrorInit, shown: string = init.detail) {
    const where = init.where ?? (init.status > 0 ? `HTTP ${init.status}` : (init.code ?? 'network error'));
    super(redact(`${subject} ${init.operation} failed (${where}): ${shown}`), { cause: init.cause });
    this.name = 'HttpError';
    this.kind = init.kind;
    this.status = init.status;
    this.operation = init.operation;
    this.detail = init.detail;
    this.retryAfterMs = init.retryAfterMs;
    this.code = init.code;
  }

  /** True when the same request may succeed later without any change of input or credentials. */
  get retryable(): boolean {
    return this.kind === 'retryable';
  }
}

export function isHttpError(e: unknown): e is HttpError {
  return e instanceof HttpError;
}

/** Longest server message kept: it ends up in a status condition. */
export const MAX_DETAIL = 1024;

/**
 * A server's message made fit for a condition: trimmed, redacted, then bounded to {@link MAX_DETAIL} (in that
 * order: a cut first could leave a secret's first characters that redaction no longer recognises).
 */
export function boundDetail(text: string, secrets: readonly string[] = []): string {
  return redactBounded(text.trim(), MAX_DETAIL, secrets);
}

/**
 * What an error answer's status says, in our words. A server that peerload reaches at an address a tenant chose
 * (a model server behind the tenant's Service, a source endpoint) may be anything the operator can reach, cloud
 * metadata included: its text in a condition would be a read channel into it, so only its status is repeated.
 */
export function answerWords(status: number): string {
  if (status === 400) return 'the server refused the request as invalid (its own log says why)';
  if (status === 401 || status === 403) return 'the server refused the credentials';
  if (status === 404) return 'the server has no such resource';
  if (status === 405) return 'the server does not allow this call (is the API enabled?)';
  if (status === 409) return 'the server reports a conflict';
  if (status === 408 || status === 429) return 'the server asks to try again later';
  if (status >= 500) return 'the server failed (its own log says why)';
  return "an unexpected answer (the server's own log says why)";
}

/** `value` when it is one of `known` (a documented error code or type a message may repeat), else undefined. */
export function knownWord(value: string | undefined, known: ReadonlySet<string>): string | undefined {
  return value !== undefined && known.has(value) ? value : undefined;
}
