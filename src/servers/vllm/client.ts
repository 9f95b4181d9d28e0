/**
 * vLLM's OpenAI-compatible server as the driver uses it: `GET /health`, `GET /v1/models` (the base model and the
 * LoRA adapters loaded, each with the directory it came from), and the run-time adapter API that
 * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` enables: `POST /v1/load_lora_adapter` (200 with a plain-text line; 400
 * when the name is loaded already and `load_inplace` is not set; 404 when the path holds no adapter) and
 * `POST /v1/unload_lora_adapter` (404 for a name not loaded). With `--api-key` every `/v1` call carries the key as
 * a bearer token; `/health` never does.
 *
 * Errors are the endpoint's {@link ReplicaError}s, classified as everywhere (src/http/classify.ts) with one
 * exception seen on the real server: the 400 for a name loaded already is a `conflict` (what the controller reads
 * as "registered"). vLLM answers `{"error": {"message", "type", "code"}}`, its API key middleware
 * `{"error": "Unauthorized"}`.
 */
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { parseBody } from '../../http/body.ts';
import type { HttpErrorKind } from '../../http/errors.ts';
import type { Call } from '../driver.ts';
import { ReplicaEndpoint, type ReplicaError } from '../endpoint.ts';

const ModelCard = z.looseObject({
  id: z.string(),
  /** The directory the base model or the adapter was loaded from. */
  root: z.string().nullish(),
  /** The base model an adapter applies to; absent for a base model. */
  parent: z.string().nullish(),
});
export type ModelCard = z.infer<typeof ModelCard>;
const ModelList = z.looseObject({ data: z.array(ModelCard) });

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
  private readonly server: ReplicaEndpoint;

  constructor(opts: VllmClientOptions) {
    this.server = new ReplicaEndpoint({
      ...opts,
      role: 'vLLM',
      defaultTimeoutMs: 60_000,
      // vLLM's words for a load of a name it holds already without `load_inplace`.
      exceptions: [{ status: 400, text: /has already been loaded/, kind: 'conflict' }],
    });
  }

  get subject(): string {
    return this.server.subject;
  }

  /** True when the engine answers `/health` with 200 (false for any other status: starting, or dead). */
  async healthy(call: Call): Promise<boolean> {
    const res = await this.server.send('health', 'GET', '/health', undefined, call, false);
    return res.status === 200;
  }

  /** Every model the server answers for: the base model(s), then the adapters loaded. */
  async models(call: Call): Promise<ModelCard[]> {
    const operation = 'list models';
    const res = await this.server.send(operation, 'GET', '/v1/models', undefined, call);
    if (res.status !== 200) throw this.server.failure(operation, res);
    const parsed = parseBody(res.text, ModelList);
    if (!parsed.ok) throw this.server.unusable(operation, res, parsed.problem);
    return parsed.data.data;
  }

  /** Loads the adapter in `path` as `name`; `inplace` replaces the adapter loaded under that name. */
  async load(name: string, path: string, inplace: boolean, call: Call): Promise<void> {
    const operation = `load adapter ${name}`;
    const body = { lora_name: name, lora_path: path, load_inplace: inplace };
    const res = await this.server.send(operation, 'POST', '/v1/load_lora_adapter', body, call);
    if (res.status !== 200) throw this.server.failure(operation, res);
  }

  /** Unloads the adapter `name`; one not loaded is fine. */
  async unload(name: string, call: Call): Promise<void> {
    const operation = `unload adapter ${name}`;
    const res = await this.server.send(
      operation,
      'POST',
      '/v1/unload_lora_adapter',
      { lora_name: name },
      call,
    );
    if (res.status !== 200 && res.status !== 404) throw this.server.failure(operation, res);
  }

  /** A failure of `operation` that is the driver's finding, not an answer of the server. */
  problem(operation: string, kind: HttpErrorKind, detail: string): ReplicaError {
    return this.server.error(operation, kind, detail);
  }
}
