/**
 * Typed errors of the model-server management API (shared/contracts/model-server.md, "Errors"). Every failure of
 * the client is a {@link ModelServerError}; controllers map `kind` to conditions in one place and never look at
 * HTTP details.
 *
 * Messages carry the server's own `type` and `message` (TorchServe's `{"code","type","message"}`, or a plugin's
 * `{"Status"}`) and never a credential: headers are never quoted and known keys are redacted from whatever the
 * server says (through the redaction boundary, src/redact.ts).
 */
import { redact } from '../redact.ts';

export const MODEL_SERVER_ERROR_KINDS = ['retryable', 'terminal', 'auth', 'notFound', 'conflict'] as const;
export type ModelServerErrorKind = (typeof MODEL_SERVER_ERROR_KINDS)[number];

export interface ModelServerErrorInit {
  kind: ModelServerErrorKind;
  /** HTTP status; 0 for network errors and time-outs. A legacy plugin's failure keeps its (misleading) 200. */
  status: number;
  /** The server's exception class (`ModelNotFoundException`, `InvalidKeyException`, ...), when it said one. */
  serverType?: string | undefined;
  /** The server's own message (already redacted), or a description of the failure. */
  serverMessage: string;
  /** What the client was doing, e.g. `register`, `describe resnet`. */
  operation: string;
  /** Management base URL of the replica (no credentials in it). */
  endpoint: string;
  /** Network error code such as ECONNREFUSED, `TIMEOUT`, or `INVALID_RESPONSE`. */
  code?: string | undefined;
  cause?: unknown;
}

const MAX_MESSAGE = 1024;

export class ModelServerError extends Error {
  readonly kind: ModelServerErrorKind;
  readonly status: number;
  readonly serverType: string | undefined;
  readonly serverMessage: string;
  readonly operation: string;
  readonly endpoint: string;
  readonly code: string | undefined;

  constructor(init: ModelServerErrorInit) {
    const where = init.status > 0 ? `HTTP ${init.status}` : (init.code ?? 'network error');
    const what = init.serverType ? `${init.serverType}: ${init.serverMessage}` : init.serverMessage;
    super(redact(`model server ${init.endpoint} ${init.operation} failed (${where}): ${what}`), {
      cause: init.cause,
    });
    this.name = 'ModelServerError';
    this.kind = init.kind;
    this.status = init.status;
    this.serverType = init.serverType;
    this.serverMessage = init.serverMessage;
    this.operation = init.operation;
    this.endpoint = redact(init.endpoint);
    this.code = init.code;
  }

  /** True when the same request may succeed later without any change of input or credentials. */
  get retryable(): boolean {
    return this.kind === 'retryable';
  }
}

export function isModelServerError(e: unknown): e is ModelServerError {
  return e instanceof ModelServerError;
}

/** The error kind of `e` when it is a {@link ModelServerError}, else undefined. */
export function errorKind(e: unknown): ModelServerErrorKind | undefined {
  return isModelServerError(e) ? e.kind : undefined;
}

export const isNotFound = (e: unknown): boolean => errorKind(e) === 'notFound';
export const isConflict = (e: unknown): boolean => errorKind(e) === 'conflict';
export const isAuthError = (e: unknown): boolean => errorKind(e) === 'auth';
export const isRetryable = (e: unknown): boolean => errorKind(e) === 'retryable';

/** TorchServe's exception type for a rejected token: answered with HTTP 400 (it is a ModelException). */
export const INVALID_KEY_EXCEPTION = 'InvalidKeyException';

/**
 * Maps an HTTP status + the server's exception type to a kind (the contract's error table):
 * 400 InvalidKeyException → auth; 404 → notFound; 409 → conflict; 408, 429, 5xx (500, 503, 507, ...) →
 * retryable; every other 4xx (400, 403 default-version removal, 405 model API disabled, ...) → terminal.
 * 429 is not sent by TorchServe itself; a proxy in front of it may, and it means "later", so it is retryable.
 */
export function kindForStatus(status: number, serverType?: string): ModelServerErrorKind {
  if (serverType === INVALID_KEY_EXCEPTION) return 'auth';
  if (status === 401) return 'auth';
  if (status === 404) return 'notFound';
  if (status === 409) return 'conflict';
  if (status === 408 || status === 429 || status >= 500) return 'retryable';
  return 'terminal';
}

/** Bounds a message so it fits a status field, then redacts `secrets`. */
export function boundMessage(text: string, secrets: readonly string[] = []): string {
  const t = text.trim();
  return redact(t.length > MAX_MESSAGE ? t.slice(0, MAX_MESSAGE) + '…' : t, secrets);
}

/** Network error codes (undici / Node) worth a short description. */
export function networkCode(e: unknown): string {
  if (e && typeof e === 'object') {
    const o = e as { code?: unknown; name?: unknown; cause?: unknown };
    if (o.name === 'TimeoutError') return 'TIMEOUT';
    if (typeof o.code === 'string') {
      if (o.code === 'UND_ERR_HEADERS_TIMEOUT' || o.code === 'UND_ERR_BODY_TIMEOUT') return 'TIMEOUT';
      return o.code;
    }
    if (o.cause !== undefined && o.cause !== e) return networkCode(o.cause);
  }
  return 'NETWORK';
}
