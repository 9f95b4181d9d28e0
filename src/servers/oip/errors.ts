/**
 * Typed errors of the Open Inference Protocol repository servers (Triton, MLServer) and of the `peerload agent`
 * beside them. Both are {@link HttpError}s of the shared HTTP layer (src/http/), so the controllers read `kind` only.
 *
 * The servers answer errors as `{"error": "..."}` (the agent as `{"error": {"reason", "message"}}`); the message is
 * kept bounded and redacted, never a header. The shared classification holds with these exceptions, each seen on
 * the real servers:
 * - Triton answers a load of a model its repository does not hold with 500 "failed to poll from model repository"
 *   (also for a config it cannot parse): the model is not there, so `notFound`, not a retryable server fault;
 * - the agent answers a wrong token with 403: an `auth` failure, as 401.
 */
import { kindForStatus } from '../../http/classify.ts';
import { HttpError, type HttpErrorInit, type HttpErrorKind } from '../../http/errors.ts';
import { redact } from '../../redact.ts';

export interface OipErrorInit extends Omit<HttpErrorInit, 'detail'> {
  /** What failed: `model server http://10.0.0.7:8000` or `agent http://10.0.0.7:8090`. */
  subject: string;
  /** The server's own message (already bounded and redacted), or a description of the failure. */
  serverMessage: string;
  /** The agent's reason word (`InvalidSpec`, `DiskBudgetExceeded`, ...), when it said one. */
  reason?: string | undefined;
}

export class OipError extends HttpError {
  readonly subject: string;
  readonly serverMessage: string;
  readonly reason: string | undefined;

  constructor(init: OipErrorInit) {
    const shown = init.reason ? `${init.reason}: ${init.serverMessage}` : init.serverMessage;
    super(init.subject, { ...init, detail: init.serverMessage }, shown);
    this.name = 'OipError';
    this.subject = redact(init.subject);
    this.serverMessage = init.serverMessage;
    this.reason = init.reason;
  }
}

/** Triton's answer to a load of a model its repository does not hold (or whose config it cannot read). */
export const TRITON_POLL_FAILED = 'failed to poll from model repository';

/** A model server's status and message as a kind (see the module comment). */
export function serverKind(status: number, message: string): HttpErrorKind {
  if (status === 500 && message.includes(TRITON_POLL_FAILED)) return 'notFound';
  return kindForStatus(status);
}

/** The `error` of an OIP error body (`{"error": "..."}`) or of the agent's (`{"error": {"reason", "message"}}`). */
export function errorFields(text: string): { message: string; reason?: string | undefined } {
  try {
    const body = JSON.parse(text) as { error?: unknown };
    if (typeof body.error === 'string') return { message: body.error };
    if (body.error && typeof body.error === 'object') {
      const e = body.error as { reason?: unknown; message?: unknown };
      return {
        message: typeof e.message === 'string' ? e.message : '',
        reason: typeof e.reason === 'string' ? e.reason : undefined,
      };
    }
  } catch {
    // not JSON: the text itself
  }
  return { message: text };
}
