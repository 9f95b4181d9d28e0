/**
 * Typed errors of the model-server management API (TorchServe answers errors as {code, type, message}). Every failure of
 * the client is a {@link ModelServerError}, an {@link HttpError} of the shared HTTP layer (src/http/): controllers
 * map `kind` to conditions in one place and never look at HTTP details.
 *
 * Messages carry the status and TorchServe's exception `type` when it is one of {@link TORCHSERVE_EXCEPTIONS}, never
 * the server's `message` or body: a model server is reached at an address the tenant's Service names, which may be
 * anything the operator can reach (cloud metadata included), and its text in a condition would be a read channel
 * into it. The one exception is the registration plugin's `{"Status"}` failure (register.ts), the words of
 * peerload's own TorchServe plugin. Whatever is kept passes the redaction boundary (src/redact.ts).
 */
import type { StatusException } from '../../http/classify.ts';
import { HttpError, type HttpErrorInit, type HttpErrorKind } from '../../http/errors.ts';
import { redact } from '../../redact.ts';

export type ModelServerErrorKind = HttpErrorKind;

export interface ModelServerErrorInit extends Omit<HttpErrorInit, 'detail'> {
  /** HTTP status; 0 for network errors and time-outs. A legacy plugin's failure keeps its (misleading) 200. */
  status: number;
  /** The server's exception class (`ModelNotFoundException`, `InvalidKeyException`, ...), when it said one. */
  serverType?: string | undefined;
  /** The server's own message (already bounded and redacted), or a description of the failure. */
  serverMessage: string;
  /** Management base URL of the replica (no credentials in it). */
  endpoint: string;
}

export class ModelServerError extends HttpError {
  readonly serverType: string | undefined;
  readonly serverMessage: string;
  readonly endpoint: string;

  constructor(init: ModelServerErrorInit) {
    const shown = init.serverType ? `${init.serverType}: ${init.serverMessage}` : init.serverMessage;
    super(`model server ${init.endpoint}`, { ...init, detail: init.serverMessage }, shown);
    this.name = 'ModelServerError';
    this.serverType = init.serverType;
    this.serverMessage = init.serverMessage;
    this.endpoint = redact(init.endpoint);
  }
}

export function isModelServerError(e: unknown): e is ModelServerError {
  return e instanceof ModelServerError;
}

/** TorchServe's exception types (its `{"code","type","message"}` errors): the only ones a message repeats. */
export const TORCHSERVE_EXCEPTIONS: ReadonlySet<string> = new Set([
  'BadRequestException',
  'ConflictStatusException',
  'DownloadArchiveException',
  'InternalServerException',
  'InvalidKeyException',
  'InvalidModelException',
  'InvalidModelVersionException',
  'InvalidSnapshotException',
  'MethodNotAllowedException',
  // Java errors TorchServe reports as the type (an old plugin's NoSuchMethodError, a worker's OutOfMemoryError).
  'NoSuchMethodError',
  'OutOfMemoryError',
  'ModelException',
  'ModelNotFoundException',
  'ModelVersionNotFoundException',
  'RequestTimeoutException',
  'ResourceNotFoundException',
  'ServiceUnavailableException',
  'WorkerInitializationException',
]);

/** TorchServe's exception type for a rejected token: answered with HTTP 400 (it is a ModelException). */
export const INVALID_KEY_EXCEPTION = 'InvalidKeyException';

/**
 * The contract's one exception to the shared classification (src/http/classify.ts), read with the server's
 * exception type: TorchServe answers a rejected key with 400 InvalidKeyException, an auth failure. So: 400
 * InvalidKeyException, 401 → auth; 404 → notFound; 409 → conflict; 408, 429, 5xx (500, 503, 507, ...) → retryable;
 * every other 4xx (400, 403 default-version removal, 405 model API disabled, ...) → terminal. 429 is not sent by
 * TorchServe itself; a proxy in front of it may, and it means "later".
 */
export const TORCHSERVE_STATUS_EXCEPTIONS: readonly StatusException[] = [
  { text: new RegExp(`^${INVALID_KEY_EXCEPTION}$`), kind: 'auth' },
];
