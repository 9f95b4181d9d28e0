/**
 * The Open Inference Protocol's repository and health calls one replica answers (Triton's model repository
 * extension; MLServer implements the same paths): index, load (Triton: with a config that replaces the
 * repository's), unload, readiness, and Triton's model config.
 */
import { z } from 'zod';
import { parseBody } from '../../http/body.ts';
import { SerializedJSON } from '../../http/request.ts';
import type { Call } from '../driver.ts';
import type { ReplicaEndpoint } from '../endpoint.ts';

/** One entry of `POST /v2/repository/index`: a model without `version` is known but was never loaded (Triton). */
export const IndexEntry = z.object({
  name: z.string(),
  version: z.string().optional(),
  /** READY, UNAVAILABLE, LOADING, UNLOADING (Triton); READY, UNAVAILABLE, UNKNOWN (MLServer). */
  state: z.string().optional(),
  reason: z.string().optional(),
});
export type IndexEntry = z.infer<typeof IndexEntry>;
const IndexBody = z.array(IndexEntry);

/** Triton's model config as `GET /v2/models/{m}/config` answers it (the fields the driver edits; others kept). */
export const TritonConfig = z.looseObject({
  name: z.string().optional(),
  version_policy: z.record(z.string(), z.unknown()).optional(),
  instance_group: z.array(z.looseObject({ count: z.number().int().nonnegative().optional() })).optional(),
  parameters: z.record(z.string(), z.looseObject({ string_value: z.string() })).optional(),
});
export type TritonConfig = z.infer<typeof TritonConfig>;

/** A load can run a model's initialisation (weights into memory): minutes, not seconds. */
export const LOAD_TIMEOUT_MS = 15 * 60_000;

const modelPath = (model: string) => `/v2/repository/models/${encodeURIComponent(model)}`;

export class OipClient {
  readonly server: ReplicaEndpoint;

  constructor(server: ReplicaEndpoint) {
    this.server = server;
  }

  /** Every model of the repository with each loaded version's state. */
  async index(call: Call): Promise<IndexEntry[]> {
    const operation = 'repository index';
    const res = await this.server.send(operation, 'POST', '/v2/repository/index', {}, call);
    if (res.status !== 200) throw this.server.failure(operation, res);
    const parsed = parseBody(res.text, IndexBody);
    if (!parsed.ok) throw this.server.unusable(operation, res, parsed.problem);
    return parsed.data;
  }

  /** Loads (or reloads) a model; Triton takes `config`, the whole model config as JSON, over the repository's. */
  async load(model: string, config: TritonConfig | undefined, call: Call): Promise<void> {
    const operation = `load ${model}`;
    const body = config ? { parameters: { config: JSON.stringify(config) } } : {};
    const timed = { ...call, timeoutMs: call.timeoutMs ?? LOAD_TIMEOUT_MS };
    const res = await this.server.send(operation, 'POST', `${modelPath(model)}/load`, body, timed);
    if (res.status !== 200) throw this.server.failure(operation, res);
  }

  /** Unloads every version; `missingOk`: a model the server does not know is fine (MLServer answers 404). */
  async unload(model: string, call: Call, missingOk = false): Promise<void> {
    const operation = `unload ${model}`;
    const res = await this.server.send(operation, 'POST', `${modelPath(model)}/unload`, {}, call);
    if (res.status === 200 || (missingOk && res.status === 404)) return;
    throw this.server.failure(operation, res);
  }

  /** Whether the model (one version of it) serves: 200; Triton answers 400 and MLServer 404 when it does not. */
  async ready(model: string, version: string | undefined, call: Call): Promise<boolean> {
    const operation = `ready ${model}${version === undefined ? '' : ` ${version}`}`;
    const path =
      `/v2/models/${encodeURIComponent(model)}` +
      (version === undefined ? '' : `/versions/${encodeURIComponent(version)}`) +
      '/ready';
    const res = await this.server.send(operation, 'GET', path, undefined, call);
    if (res.status === 200) return true;
    if (res.status === 400 || res.status === 404) return false;
    throw this.server.failure(operation, res);
  }

  /**
   * `POST /v2/models/{name}/versions/{version}/infer` with `body` (JSON text, sent as it is): a canary's probe. Any
   * status is an answer; the body is read up to `maxBytes`.
   */
  async infer(
    model: string,
    version: string,
    body: string,
    maxBytes: number,
    call: Call,
  ): Promise<{ status: number; text: string }> {
    const operation = `infer ${model} ${version}`;
    const path = `/v2/models/${encodeURIComponent(model)}/versions/${encodeURIComponent(version)}/infer`;
    const res = await this.server.send(operation, 'POST', path, new SerializedJSON(body), {
      ...call,
      maxResponseBytes: maxBytes,
    });
    return { status: res.status, text: res.text };
  }

  /** Triton's config of a loaded model; undefined when the model is not loaded (404). */
  async config(model: string, call: Call): Promise<TritonConfig | undefined> {
    const operation = `config ${model}`;
    const res = await this.server.send(
      operation,
      'GET',
      `/v2/models/${encodeURIComponent(model)}/config`,
      undefined,
      call,
    );
    if (res.status === 404 || res.status === 400) return undefined;
    if (res.status !== 200) throw this.server.failure(operation, res);
    const parsed = parseBody(res.text, TritonConfig);
    if (!parsed.ok) throw this.server.unusable(operation, res, parsed.problem);
    return parsed.data;
  }
}
