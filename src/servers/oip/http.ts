/**
 * One HTTP endpoint of a replica (the model server's or the agent's): the shared exchange (src/http/request.ts)
 * with an optional bearer token read per call, and the errors of this module. Any status is an answer here; the
 * callers decide which ones fail.
 */
import type { Dispatcher } from 'undici';
import { boundDetail } from '../../http/errors.ts';
import { jsonEndpoint, sendJSON, type HttpResponse, type JsonEndpoint } from '../../http/request.ts';
import type { Call } from '../driver.ts';
import { OipError, errorFields } from './errors.ts';

export interface EndpointOptions {
  /** `http(s)://host:port`, no path. */
  baseURL: string;
  /** Named in errors: `model server` or `agent`. */
  role: string;
  dispatcher: Dispatcher;
  /** The bearer token, read for every call; undefined: none sent. */
  token?: (() => Promise<string>) | undefined;
  /** Per exchange, ms (a call's own `timeoutMs` wins). */
  timeoutMs?: number | undefined;
  /** The status and message as a kind. */
  kind: (status: number, message: string) => OipError['kind'];
}

export class Endpoint {
  readonly url: string;
  private readonly origin: string;
  private readonly opts: EndpointOptions;
  private readonly secrets: string[] = [];
  private readonly endpoint: JsonEndpoint;

  constructor(opts: EndpointOptions) {
    const url = new URL(opts.baseURL);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new TypeError(`${opts.role} URL must be http(s): ${url.protocol}`);
    this.origin = url.origin;
    this.endpoint = jsonEndpoint(this.origin, opts, this.secrets, 30_000);
    this.url = url.origin;
    this.opts = opts;
  }

  get subject(): string {
    return `${this.opts.role} ${this.url}`;
  }

  async send(
    operation: string,
    method: Dispatcher.HttpMethod,
    path: string,
    body: unknown,
    call: Call,
  ): Promise<HttpResponse> {
    return sendJSON(
      this.endpoint,
      { operation, method, path, body, timeoutMs: call.timeoutMs, signal: call.signal },
      {
        toError: (init) => new OipError({ ...init, subject: this.subject, serverMessage: init.detail }),
        noToken: (m) =>
          new OipError({
            kind: 'auth',
            status: 0,
            operation,
            subject: this.subject,
            serverMessage: `no token: ${m}`,
          }),
      },
    );
  }

  /** The error of an answer the caller does not accept. */
  failure(operation: string, res: HttpResponse): OipError {
    const { message, reason } = errorFields(res.text);
    return new OipError({
      kind: this.opts.kind(res.status, message),
      status: res.status,
      operation,
      subject: this.subject,
      reason,
      serverMessage: boundDetail(message || `HTTP ${res.status} without a message`, this.secrets),
    });
  }

  /** A 2xx body that is not what the API answers. */
  unusable(operation: string, res: HttpResponse, problem: string): OipError {
    return new OipError({
      kind: 'retryable',
      status: res.status,
      operation,
      subject: this.subject,
      code: 'INVALID_RESPONSE',
      serverMessage: boundDetail(problem, this.secrets),
    });
  }
}
