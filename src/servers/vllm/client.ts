/**
 * vLLM's OpenAI-compatible server as the driver uses it: `GET /health`, `GET /v1/models` (the base model and the
 * LoRA adapters loaded, each with the directory it came from), and the run-time adapter API that
 * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` enables: `POST /v1/load_lora_adapter` (200 with a plain-text line; 400
 * when the name is loaded already and `load_inplace` is not set; 404 when the path holds no adapter) and
 * `POST /v1/unload_lora_adapter` (404 for a name not loaded). With `--api-key` every `/v1` call carries the key as
 * a bearer token; `/health` never does.
 *
 * Errors are {@link VllmError}s classified as everywhere (src/http/classify.ts), with one exception seen on the
 * real server: the 400 for a name loaded already is a `conflict` (what the controller reads as "registered").
 */
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { parseBody } from '../../http/body.ts';
import { INVALID_RESPONSE, kindForStatus } from '../../http/classify.ts';
import { HttpError, boundDetail, type HttpErrorInit, type HttpErrorKind } from '../../http/errors.ts';
import { jsonEndpoint, sendJSON, type HttpResponse, type JsonEndpoint } from '../../http/request.ts';
import type { Call } from '../driver.ts';

export class VllmError extends HttpError {
  constructor(subject: string, init: HttpErrorInit) {
    super(subject, init);
    this.name = 'VllmError';
  }
}

const ModelCard = z.looseObject({
  id: z.string(),
  /** The directory the base model or the adapter was loaded from. */
  root: z.string().nullish(),
  /** The base model an adapter applies to; absent for a base model. */
  parent: z.string().nullish(),
});
export type ModelCard = z.infer<typeof ModelCard>;
const ModelList = z.looseObject({ data: z.array(ModelCard) });

/** vLLM's words for a load of a name it holds already without `load_inplace`. */
const ALREADY_LOADED = /has already been loaded/;

export interface VllmClientOptions {
  /** `http(s)://host:port` of the server. */
  baseURL: string;
  dispatcher: Dispatcher;
  /** The server's `--api-key`, read for every call; absent: none sent. */
  token?: (() => Promise<string>) | undefined;
  /** Per exchange, ms (a call's own `timeoutMs` wins). A load reads the adapter's files: give it room. */
  timeoutMs?: number | undefined;
}

export class VllmClient {
  private readonly opts: VllmClientOptions;
  private readonly origin: string;
  private readonly secrets: string[] = [];
  private readonly endpoint: JsonEndpoint;

  constructor(opts: VllmClientOptions) {
    const url = new URL(opts.baseURL);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new TypeError(`the vLLM server's URL must be http(s), got ${url.protocol}`);
    this.origin = url.origin;
    this.endpoint = jsonEndpoint(this.origin, opts, this.secrets, 60_000);
    this.opts = opts;
  }

  get subject(): string {
    return `vLLM ${this.origin}`;
  }

  /** True when the engine answers `/health` with 200 (false for any other status: starting, or dead). */
  async healthy(call: Call): Promise<boolean> {
    const res = await this.send('health', 'GET', '/health', undefined, call, false);
    return res.status === 200;
  }

  /** Every model the server answers for: the base model(s), then the adapters loaded. */
  async models(call: Call): Promise<ModelCard[]> {
    const operation = 'list models';
    const res = await this.send(operation, 'GET', '/v1/models', undefined, call);
    if (res.status !== 200) throw this.failure(operation, res);
    const parsed = parseBody(res.text, ModelList);
    if (!parsed.ok) throw this.error(operation, 'retryable', parsed.problem, res.status, INVALID_RESPONSE);
    return parsed.data.data;
  }

  /** Loads the adapter in `path` as `name`; `inplace` replaces the adapter loaded under that name. */
  async load(name: string, path: string, inplace: boolean, call: Call): Promise<void> {
    const operation = `load adapter ${name}`;
    const body = { lora_name: name, lora_path: path, load_inplace: inplace };
    const res = await this.send(operation, 'POST', '/v1/load_lora_adapter', body, call);
    if (res.status !== 200) throw this.failure(operation, res);
  }

  /** Unloads the adapter `name`; one not loaded is fine. */
  async unload(name: string, call: Call): Promise<void> {
    const operation = `unload adapter ${name}`;
    const res = await this.send(operation, 'POST', '/v1/unload_lora_adapter', { lora_name: name }, call);
    if (res.status !== 200 && res.status !== 404) throw this.failure(operation, res);
  }

  private async send(
    operation: string,
    method: Dispatcher.HttpMethod,
    path: string,
    body: unknown,
    call: Call,
    authorized = true,
  ): Promise<HttpResponse> {
    return sendJSON(
      authorized ? this.endpoint : { ...this.endpoint, token: undefined },
      { operation, method, path, body, timeoutMs: call.timeoutMs, signal: call.signal },
      {
        toError: (init) => new VllmError(this.subject, init),
        noToken: (m) => this.error(operation, 'auth', `no API key: ${m}`),
      },
    );
  }

  /** The error of an answer the caller does not accept: `{"error": {"message", "type", "code"}}` or
   *  `{"error": "Unauthorized"}` (the API key's middleware). */
  private failure(operation: string, res: HttpResponse): VllmError {
    let message = res.text;
    try {
      const e = (JSON.parse(res.text) as { error?: unknown }).error;
      if (typeof e === 'string') message = e;
      else if (e && typeof e === 'object' && typeof (e as { message?: unknown }).message === 'string')
        message = (e as { message: string }).message;
    } catch {
      // not JSON: the text itself
    }
    const kind: HttpErrorKind =
      res.status === 400 && ALREADY_LOADED.test(message) ? 'conflict' : kindForStatus(res.status);
    return this.error(operation, kind, message || `HTTP ${res.status} without a message`, res.status);
  }

  private error(
    operation: string,
    kind: HttpErrorKind,
    detail: string,
    status = 0,
    code?: string,
  ): VllmError {
    return new VllmError(this.subject, {
      kind,
      status,
      operation,
      detail: boundDetail(detail, this.secrets),
      code,
    });
  }
}
