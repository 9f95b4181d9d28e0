/**
 * One HTTP endpoint of a replica, as every replica-side client but TorchServe's holds it (vLLM's API, the OIP
 * repository API of Triton and MLServer, the `peerload agent`): the URL checked once, the shared JSON exchange
 * (src/http/request.ts) with a bearer token read per call, the error bodies these servers answer, and their errors,
 * each a {@link ReplicaError} classified as everywhere (src/http/classify.ts) but for the exceptions its client
 * declares. Any status is an answer here; the clients decide which ones fail.
 */
import type { Dispatcher } from 'undici';
import { INVALID_RESPONSE, kindForStatus, type StatusException } from '../http/classify.ts';
import {
  HttpError,
  answerWords,
  boundDetail,
  type HttpErrorInit,
  type HttpErrorKind,
} from '../http/errors.ts';
import { jsonEndpoint, sendJSON, type HttpResponse, type JsonEndpoint } from '../http/request.ts';
import type { Call } from './driver.ts';

/** The agent's reason words (`InvalidSpec`, `DiskBudgetExceeded`): one capitalised word, never a value. */
const REASON_WORD = /^[A-Z][a-z]+(?:[A-Z][a-z]+){0,6}$/;

/** A failed call of a replica's server or agent. */
export class ReplicaError extends HttpError {
  /** The agent's reason word (`InvalidSpec`, `DiskBudgetExceeded`, `DownloadFailed`...), when it gave one. */
  readonly reason: string | undefined;

  constructor(subject: string, init: HttpErrorInit & { reason?: string | undefined }) {
    super(subject, init, init.reason ? `${init.reason}: ${init.detail}` : init.detail);
    this.name = 'ReplicaError';
    this.reason = init.reason;
  }
}

/**
 * The `error` of an error body: `{"error": "..."}` (OIP servers, vLLM's API key middleware), `{"error":
 * {"message", "reason"}}` (the agent) or `{"error": {"message", "type", "code"}}` (vLLM); else the text itself.
 */
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

export interface ReplicaEndpointOptions {
  /** `http(s)://host:port` (a path is dropped). */
  baseURL: string;
  /** Who answers, first words of its errors: `vLLM`, `model server`, `agent`. */
  role: string;
  dispatcher: Dispatcher;
  /** The bearer token, read for every call; undefined: none sent. */
  token?: (() => Promise<string>) | undefined;
  /** Per exchange, ms (a call's own `timeoutMs` wins). */
  timeoutMs?: number | undefined;
  /** The time-out when neither the options nor a call name one, ms. */
  defaultTimeoutMs: number;
  /** The server's documented exceptions to the shared classification, read with its message. */
  exceptions?: readonly StatusException[] | undefined;
}

/** Extra fields of an error: its HTTP status, the agent's reason word, a code. */
export interface ErrorExtras {
  status?: number | undefined;
  reason?: string | undefined;
  code?: string | undefined;
  /** In place of the status in the message (HttpErrorInit's `where`). */
  where?: string | undefined;
}

export class ReplicaEndpoint {
  /** `http(s)://host:port`. */
  readonly origin: string;
  readonly subject: string;
  private readonly opts: ReplicaEndpointOptions;
  /** The tokens read so far: no error quotes them. */
  private readonly secrets: string[] = [];
  private readonly json: JsonEndpoint;

  constructor(opts: ReplicaEndpointOptions) {
    const url = new URL(opts.baseURL);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new TypeError(`the ${opts.role}'s URL must be http(s), got ${url.protocol}`);
    this.origin = url.origin;
    this.subject = `${opts.role} ${this.origin}`;
    this.json = jsonEndpoint(this.origin, opts, this.secrets, opts.defaultTimeoutMs);
    this.opts = opts;
  }

  /** One JSON exchange; `authorized: false` sends no token (vLLM's `/health`). */
  async send(
    operation: string,
    method: Dispatcher.HttpMethod,
    path: string,
    body: unknown,
    call: Call & { maxResponseBytes?: number | undefined },
    authorized = true,
  ): Promise<HttpResponse> {
    return sendJSON(
      authorized ? this.json : { ...this.json, token: undefined },
      {
        operation,
        method,
        path,
        body,
        timeoutMs: call.timeoutMs,
        signal: call.signal,
        maxResponseBytes: call.maxResponseBytes,
      },
      {
        toError: (init) => new ReplicaError(this.subject, init),
        noToken: (m) => this.error(operation, 'auth', `no token for the ${this.opts.role}: ${m}`),
      },
    );
  }

  /**
   * The error of an answer the caller does not accept. The server's text classifies it but is never quoted (an
   * endpoint may be any address a tenant's Service names: {@link answerWords}), except the agent's own error shape,
   * `{"error": {"reason", "message"}}` with a reason word: words a peerload agent wrote, which name the file and
   * the fix.
   */
  failure(operation: string, res: HttpResponse): ReplicaError {
    const { message, reason } = errorFields(res.text);
    const kind = kindForStatus(res.status, message, this.opts.exceptions);
    const agents = this.opts.role === 'agent' && reason !== undefined && REASON_WORD.test(reason);
    const detail = agents && message ? message : answerWords(res.status);
    return this.error(operation, kind, detail, { status: res.status, reason: agents ? reason : undefined });
  }

  /** A 2xx body that is not what the API answers: retryable (src/http/classify.ts says why). */
  unusable(operation: string, res: HttpResponse, problem: string): ReplicaError {
    return this.error(operation, 'retryable', problem, { status: res.status, code: INVALID_RESPONSE });
  }

  /** An error of this endpoint, its detail bounded and without any token read. */
  error(operation: string, kind: HttpErrorKind, detail: string, extras: ErrorExtras = {}): ReplicaError {
    return new ReplicaError(this.subject, {
      kind,
      status: extras.status ?? 0,
      operation,
      detail: boundDetail(detail, this.secrets),
      reason: extras.reason,
      code: extras.code,
      where: extras.where,
    });
  }
}
