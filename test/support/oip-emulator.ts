/**
 * An Open Inference Protocol repository server, emulated in the two ways the real ones answer (held to their
 * recorded answers by test/unit/oip-replay.test.ts): `triton` (Triton 2.51, `--model-control-mode=explicit`) and
 * `mlserver` (MLServer 1.7). It reads the model repository from disk as they do: Triton's model directories with
 * numbered version subdirectories and the load's `config` (version policy, instance count), MLServer's
 * `model-settings.json` files anywhere under the root (name, `parameters.version`, `parameters.uri`). It runs no
 * model: a load fails only when told (`failLoad`), or, for MLServer, when the model's file is missing.
 * `failNext` makes the next request to a path answer a given status (failure injection for the driver's tests).
 * Inference (`POST /v2/models/{name}/versions/{version}/infer`) answers as an identity model does, each input
 * `INPUTn` back as `OUTPUTn`, for a version in state READY; `answerWith` makes one version answer something else
 * (a version that answers wrongly).
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join, resolve } from 'node:path';

export type OipFlavour = 'triton' | 'mlserver';

interface VersionState {
  state: 'READY' | 'UNAVAILABLE';
  reason: string;
}

export interface OipEmulator {
  url: string;
  flavour: OipFlavour;
  repository: string;
  /** Requests seen, `METHOD path`. */
  requests: string[];
  /** Loads of `model` fail with this reason (Triton: each version it would load goes UNAVAILABLE with it). */
  failLoad(model: string, reason: string): void;
  /** The next request to `path` answers `status` with `{"error": message}`. */
  failNext(path: string, status: number, message: string): void;
  /** The config a Triton model was last loaded with. */
  configOf(model: string): Record<string, unknown> | undefined;
  /** Inference of `model` `version` answers 200 with `answer` instead of the identity's outputs. */
  answerWith(model: string, version: string, answer: unknown): void;
  close(): Promise<void>;
}

type Reply = { status: number; type?: string; body: string };
const json = (status: number, body: unknown): Reply => ({
  status,
  type: 'application/json',
  body: JSON.stringify(body),
});
const error = (status: number, message: string, type = 'application/json'): Reply => ({
  status,
  type,
  body: JSON.stringify({ error: message }),
});

/** Triton's side: model directories, configs, version states. */
class TritonRepo {
  readonly root: string;
  readonly states = new Map<string, Map<string, VersionState>>();
  readonly configs = new Map<string, Record<string, unknown>>();
  readonly failures = new Map<string, string>();

  constructor(root: string) {
    this.root = root;
  }

  models(): string[] {
    return readdirSync(this.root, { withFileTypes: true })
      .filter((d) => d.isDirectory() && !d.name.startsWith('.'))
      .map((d) => d.name)
      .sort();
  }

  versionsOnDisk(model: string): string[] {
    return readdirSync(join(this.root, model), { withFileTypes: true })
      .filter((d) => d.isDirectory() && /^\d+$/.test(d.name))
      .map((d) => d.name)
      .sort((a, b) => Number(a) - Number(b));
  }

  index(): Reply {
    const out: unknown[] = [];
    for (const m of this.models()) {
      const states = this.states.get(m);
      if (!states?.size) out.push({ name: m });
      else
        for (const [version, s] of [...states].sort((a, b) => Number(a[0]) - Number(b[0])))
          out.push({ name: m, version, state: s.state, ...(s.reason ? { reason: s.reason } : {}) });
    }
    return json(200, out);
  }

  /** The repository's config: what config.pbtxt's instance count says, the rest Triton's defaults. */
  private diskConfig(model: string): Record<string, unknown> {
    const pbtxt = join(this.root, model, 'config.pbtxt');
    const count = existsSync(pbtxt)
      ? Number(/count:\s*(\d+)/.exec(readFileSync(pbtxt, 'utf8'))?.[1] ?? 1)
      : 1;
    return {
      name: model,
      backend: 'python',
      version_policy: { latest: { num_versions: 1 } },
      instance_group: [{ kind: 'KIND_CPU', count }],
      parameters: {},
    };
  }

  private selected(model: string, policy: Record<string, unknown>): string[] {
    const disk = this.versionsOnDisk(model);
    const specific = (policy['specific'] as { versions?: number[] } | undefined)?.versions;
    if (specific) return disk.filter((v) => specific.includes(Number(v)));
    if (policy['all']) return disk;
    const n = (policy['latest'] as { num_versions?: number } | undefined)?.num_versions ?? 1;
    return disk.slice(-n);
  }

  load(model: string, body: { parameters?: { config?: string } }): Reply {
    const pollFailed = error(500, `failed to load '${model}', failed to poll from model repository`);
    if (!this.models().includes(model)) return pollFailed;
    let config: Record<string, unknown>;
    if (body.parameters?.config !== undefined) {
      try {
        config = {
          parameters: {},
          ...(JSON.parse(body.parameters.config) as Record<string, unknown>),
          name: model,
        };
      } catch {
        return pollFailed;
      }
      config['version_policy'] ??= { latest: { num_versions: 1 } };
      config['instance_group'] ??= [{ kind: 'KIND_CPU', count: 1 }];
    } else config = this.diskConfig(model);
    const wanted = this.selected(model, config['version_policy'] as Record<string, unknown>);
    if (wanted.length === 0)
      return error(
        400,
        `load failed for model '${model}': at least one version must be available under the version policy of model '${model}'\n`,
      );
    const states = this.states.get(model) ?? new Map<string, VersionState>();
    this.states.set(model, states);
    const failure = this.failures.get(model);
    for (const v of wanted)
      states.set(v, failure ? { state: 'UNAVAILABLE', reason: failure } : { state: 'READY', reason: '' });
    if (failure)
      return error(
        400,
        `load failed for model '${model}': version ${wanted[0]} is at UNAVAILABLE state: ${failure};\n`,
      );
    for (const [v, s] of states)
      if (!wanted.includes(v) && s.state === 'READY')
        states.set(v, { state: 'UNAVAILABLE', reason: 'unloaded' });
    this.configs.set(model, config);
    return { status: 200, type: 'application/json', body: '' };
  }

  unload(model: string): Reply {
    for (const [v, s] of this.states.get(model) ?? [])
      if (s.state === 'READY') this.states.get(model)!.set(v, { state: 'UNAVAILABLE', reason: 'unloaded' });
    return { status: 200, type: 'application/json', body: '' };
  }

  ready(model: string, version: string | undefined): Reply {
    const states = this.states.get(model);
    const ok = [...(states ?? [])].some(
      ([v, s]) => s.state === 'READY' && (version === undefined || v === version),
    );
    return ok
      ? { status: 200, type: 'text/plain', body: '' }
      : error(400, 'Model version not ready', 'text/plain');
  }

  config(model: string): Reply {
    const states = this.states.get(model);
    if (!states?.size) return error(404, `Request for unknown model: '${model}' is not found`);
    if (![...states.values()].some((s) => s.state === 'READY'))
      return error(404, `Request for unknown model: '${model}' has no available versions`);
    return json(200, this.configs.get(model));
  }
}

interface Settings {
  name: string;
  version: string | undefined;
  uri: string;
}

/** MLServer's side: model-settings.json files and the loaded versions. */
class MLServerRepo {
  readonly root: string;
  readonly loaded = new Map<string, Set<string | undefined>>();
  readonly failures = new Map<string, string>();

  constructor(root: string) {
    this.root = root;
  }

  list(): Settings[] {
    const out: Settings[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.name === 'model-settings.json') {
          const s = JSON.parse(readFileSync(p, 'utf8')) as {
            name?: string;
            parameters?: { version?: string; uri?: string };
          };
          out.push({
            name: s.name ?? dirname(p).split('/').pop()!,
            version: s.parameters?.version,
            uri: resolve(dirname(p), s.parameters?.uri ?? '.'),
          });
        }
      }
    };
    walk(this.root);
    return out;
  }

  index(): Reply {
    return json(
      200,
      this.list().map((s) => ({
        name: s.name,
        version: s.version,
        state: this.loaded.get(s.name)?.size ? 'READY' : 'UNAVAILABLE',
        reason: '',
      })),
    );
  }

  load(model: string): Reply {
    const found = this.list().filter((s) => s.name === model);
    if (found.length === 0) return error(404, `Model ${model} not found`);
    const failure = this.failures.get(model);
    if (failure) return error(400, failure);
    const missing = found.find((s) => !existsSync(s.uri) || !statSync(s.uri).isFile());
    if (missing)
      return error(
        422,
        `mlserver.errors.InvalidModelURI: Invalid URI specified for model ${model} (${missing.uri})`,
      );
    this.loaded.set(model, new Set(found.map((s) => s.version)));
    return { status: 200, body: '' };
  }

  unload(model: string): Reply {
    if (!this.loaded.get(model)?.size) return error(404, `Model ${model} not found`);
    this.loaded.delete(model);
    return { status: 200, body: '' };
  }

  ready(model: string, version: string | undefined): Reply {
    const versions = this.loaded.get(model);
    if (version !== undefined && !versions?.has(version))
      return error(404, `Model ${model} with version ${version} not found`);
    if (!versions?.size) return error(404, `Model ${model} not found`);
    return { status: 200, body: '' };
  }
}

async function readJSON(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

/** The identity model's answer: every input back, renamed INPUTn to OUTPUTn (Triton's and MLServer's shape). */
function identity(model: string, version: string, body: Record<string, unknown>): Reply {
  const inputs = Array.isArray(body['inputs']) ? (body['inputs'] as Record<string, unknown>[]) : [];
  return json(200, {
    model_name: model,
    model_version: version,
    outputs: inputs.map((i) => ({ ...i, name: String(i['name'] ?? '').replace(/^INPUT/, 'OUTPUT') })),
  });
}

/** Whether `version` of `model` serves. */
function serves(t: TritonRepo | MLServerRepo, model: string, version: string): boolean {
  return t instanceof TritonRepo
    ? t.states.get(model)?.get(version)?.state === 'READY'
    : (t.loaded.get(model)?.has(version) ?? false);
}

function route(
  t: TritonRepo | MLServerRepo,
  method: string,
  path: string,
  body: Record<string, unknown>,
  answers: ReadonlyMap<string, unknown>,
): Reply {
  if (method === 'GET' && path === '/v2/health/ready') return { status: 200, body: '' };
  if (method === 'POST' && path === '/v2/repository/index') return t.index();
  const repo = /^\/v2\/repository\/models\/([^/]+)\/(load|unload)$/.exec(path);
  if (method === 'POST' && repo) {
    const model = decodeURIComponent(repo[1]!);
    if (repo[2] === 'unload') return t.unload(model);
    return t instanceof TritonRepo ? t.load(model, body) : t.load(model);
  }
  const ready = /^\/v2\/models\/([^/]+)(?:\/versions\/([^/]+))?\/ready$/.exec(path);
  if (method === 'GET' && ready)
    return t.ready(decodeURIComponent(ready[1]!), ready[2] && decodeURIComponent(ready[2]));
  const infer = /^\/v2\/models\/([^/]+)\/versions\/([^/]+)\/infer$/.exec(path);
  if (method === 'POST' && infer) {
    const [model, version] = [decodeURIComponent(infer[1]!), decodeURIComponent(infer[2]!)];
    if (!serves(t, model, version))
      return t instanceof TritonRepo
        ? error(400, `Request for unknown model: '${model}' version ${version} is not at ready state`)
        : error(404, `Model ${model} with version ${version} not found`);
    const key = `${model}/${version}`;
    return answers.has(key) ? json(200, answers.get(key)) : identity(model, version, body);
  }
  const config = /^\/v2\/models\/([^/]+)\/config$/.exec(path);
  if (method === 'GET' && config && t instanceof TritonRepo) return t.config(decodeURIComponent(config[1]!));
  return t instanceof TritonRepo
    ? error(404, 'Not Found')
    : { status: 404, type: 'application/json', body: '{"detail":"Not Found"}' };
}

export async function startOipEmulator(
  flavour: OipFlavour,
  repository: string,
  host = '127.0.0.1',
): Promise<OipEmulator> {
  const repo = flavour === 'triton' ? new TritonRepo(repository) : new MLServerRepo(repository);
  const injected = new Map<string, { status: number; message: string }>();
  const answers = new Map<string, unknown>();
  const requests: string[] = [];
  const server = createServer((req, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://oip').pathname;
    requests.push(`${req.method} ${path}`);
    void readJSON(req)
      .then((body) => {
        const inject = injected.get(path);
        if (inject) injected.delete(path);
        const reply = inject
          ? error(inject.status, inject.message)
          : route(repo, req.method ?? 'GET', path, body, answers);
        res.writeHead(reply.status, reply.type ? { 'content-type': reply.type } : {});
        res.end(reply.body);
      })
      .catch(() => {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: 'the body is not JSON' }));
      });
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${port}`,
    flavour,
    repository,
    requests,
    failLoad: (model, reason) => repo.failures.set(model, reason),
    failNext: (path, status, message) => injected.set(path, { status, message }),
    configOf: (model) => (repo instanceof TritonRepo ? repo.configs.get(model) : undefined),
    answerWith: (model, version, answer) => answers.set(`${model}/${version}`, answer),
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
