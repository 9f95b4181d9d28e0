/**
 * The request scripts that the real Triton and MLServer answered (scripts/record-oip-exchanges.ts wrote their
 * answers to test/fixtures/oip/) and that the OIP emulator must answer the same way (test/unit/oip-replay.test.ts).
 * A step may change the model repository first (both servers read it from disk), and may tell the emulator what
 * the real server learns by running a model (a model.py that raises).
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { OipEmulator } from './oip-emulator.ts';

export interface StepContext {
  repo: string;
  /** Writes a scikit-learn model file (the recorder: a real one; the emulator: any bytes). */
  sklearnModel(path: string, slope: number): Promise<void>;
}

export interface OipStep {
  name: string;
  before?: (ctx: StepContext) => Promise<void>;
  emulate?: (emulator: OipEmulator, ctx: StepContext) => void;
  method: 'GET' | 'POST';
  path: string;
  body?: unknown;
  /** Waits until no version is LOADING or UNLOADING first (Triton unloads in the background). */
  settle?: boolean;
}

export interface RecordedResponse {
  status: number;
  contentType: string;
  body: string;
}

export interface OipExchange {
  name: string;
  request: { method: string; path: string; body?: unknown };
  response: RecordedResponse;
}

export interface OipFixture {
  server: string;
  recordedAt: string;
  exchanges: OipExchange[];
}

const put = async (path: string, text: string | Buffer) => {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text);
};

/** A python-backend model that adds the offset of its version's `offset.json` to its input. */
export const ECHO_MODEL_PY = `import json, os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        directory = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(directory, "offset.json")) as f:
            self.offset = float(json.load(f)["offset"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + self.offset).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
`;

export const ECHO_CONFIG_PBTXT = `backend: "python"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
`;

/** The same config in the JSON form a load's `config` parameter takes. */
export const echoConfig = (versions: number[], count: number) => ({
  name: 'echo',
  backend: 'python',
  max_batch_size: 0,
  input: [{ name: 'INPUT0', data_type: 'TYPE_FP32', dims: [-1] }],
  output: [{ name: 'OUTPUT0', data_type: 'TYPE_FP32', dims: [-1] }],
  version_policy: { specific: { versions } },
  instance_group: [{ kind: 'KIND_CPU', count }],
  parameters: { 'peerload.workers.min': { string_value: '1' } },
});

export async function writeEchoVersion(dir: string, offset: number): Promise<void> {
  await put(join(dir, 'model.py'), ECHO_MODEL_PY);
  await put(join(dir, 'offset.json'), JSON.stringify({ offset }));
}

const BAD_MODEL_PY = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("weights missing")
`;

const index = (name = 'index'): OipStep => ({ name, method: 'POST', path: '/v2/repository/index', body: {} });
const load = (model: string, body: unknown = {}, name = `load ${model}`): OipStep => ({
  name,
  method: 'POST',
  path: `/v2/repository/models/${model}/load`,
  body,
});
const unload = (model: string): OipStep => ({
  name: `unload ${model}`,
  method: 'POST',
  path: `/v2/repository/models/${model}/unload`,
  body: {},
});
const ready = (model: string, version?: string): OipStep => ({
  name: `ready ${model}${version ? ` ${version}` : ''}`,
  method: 'GET',
  path: `/v2/models/${model}${version ? `/versions/${version}` : ''}/ready`,
});
const config = (model: string, name = `config ${model}`): OipStep => ({
  name,
  method: 'GET',
  path: `/v2/models/${model}/config`,
});

export const TRITON_SCRIPT: OipStep[] = [
  {
    ...index('index, nothing loaded'),
    before: async ({ repo }) => {
      await put(join(repo, 'echo/config.pbtxt'), ECHO_CONFIG_PBTXT);
      await writeEchoVersion(join(repo, 'echo/1'), 1);
      await put(join(repo, 'bad/config.pbtxt'), 'backend: "python"\n');
      await put(join(repo, 'bad/1/model.py'), BAD_MODEL_PY);
    },
  },
  ready('echo'),
  config('echo', 'config of a model never loaded'),
  load('nope', {}, 'load of a model the repository does not hold'),
  unload('nope'),
  load('echo', {}, 'load with the repository config'),
  index('index, echo 1 loaded'),
  ready('echo'),
  ready('echo', '1'),
  ready('echo', '2'),
  config('echo'),
  {
    ...load(
      'echo',
      { parameters: { config: JSON.stringify(echoConfig([1, 2], 2)) } },
      'load 1 and 2, two instances',
    ),
    before: ({ repo }) => writeEchoVersion(join(repo, 'echo/2'), 2),
  },
  index('index, echo 1 and 2'),
  config('echo', 'config after the override'),
  load('echo', { parameters: { config: JSON.stringify(echoConfig([2], 2)) } }, 'reload without 1'),
  { ...index('index, echo 1 unloaded'), settle: true },
  ready('echo', '1'),
  load('echo', { parameters: { config: '{not json' } }, 'load with a config that is not JSON'),
  load('echo', { parameters: { config: JSON.stringify(echoConfig([7], 1)) } }, 'load of a version not there'),
  {
    ...load('bad', {}, 'load of a model.py that raises'),
    emulate: (e, { repo }) =>
      e.failLoad(
        'bad',
        `Internal: ValueError: weights missing\n\nAt:\n  ${repo}/bad/1/model.py(6): initialize\n`,
      ),
  },
  index('index, bad unavailable'),
  ready('bad'),
  unload('echo'),
  { ...index('index, echo unloaded'), settle: true },
  config('echo', 'config of an unloaded model'),
  ready('echo'),
  config('nope', 'config of an unknown model'),
];

const settings = (name: string, version: string) =>
  JSON.stringify({
    name,
    implementation: 'mlserver_sklearn.SKLearnModel',
    parameters: { uri: './model.joblib', version },
  });

export const MLSERVER_SCRIPT: OipStep[] = [
  {
    ...index('index, nothing loaded'),
    before: async (ctx) => {
      await put(join(ctx.repo, 'iris/v1/model-settings.json'), settings('iris', 'v1'));
      await ctx.sklearnModel(join(ctx.repo, 'iris/v1/model.joblib'), 1);
      await put(join(ctx.repo, 'broken/v1/model-settings.json'), settings('broken', 'v1'));
    },
  },
  ready('iris'),
  load('nope', {}, 'load of a model the repository does not hold'),
  unload('nope'),
  load('iris'),
  index('index, iris v1 loaded'),
  ready('iris'),
  ready('iris', 'v1'),
  ready('iris', 'v9'),
  {
    ...load('iris', {}, 'load with v2 added'),
    before: async (ctx) => {
      await put(join(ctx.repo, 'iris/v2/model-settings.json'), settings('iris', 'v2'));
      await ctx.sklearnModel(join(ctx.repo, 'iris/v2/model.joblib'), 2);
    },
  },
  index('index, iris v1 and v2'),
  {
    ...load('iris', {}, 'load with v1 removed'),
    before: ({ repo }) => rm(join(repo, 'iris/v1'), { recursive: true, force: true }),
  },
  index('index, iris v2'),
  ready('iris', 'v1'),
  load('broken', {}, 'load of a model whose file is missing'),
  unload('iris'),
  index('index, iris unloaded'),
  unload('iris'),
  ready('iris'),
];

async function settle(baseURL: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`${baseURL}/v2/repository/index`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    if (!/"(LOADING|UNLOADING)"/.test(await res.text())) return;
    await sleep(100);
  }
  throw new Error('the server kept a version loading or unloading for 10 s');
}

/** Runs a script against a server (real or emulated) on `repo`; the answers in order. */
export async function runExchanges(
  baseURL: string,
  ctx: StepContext,
  script: readonly OipStep[],
  emulator?: OipEmulator,
): Promise<OipExchange[]> {
  const out: OipExchange[] = [];
  for (const step of script) {
    await step.before?.(ctx);
    if (emulator) step.emulate?.(emulator, ctx);
    if (step.settle) await settle(baseURL);
    const res = await fetch(`${baseURL}${step.path}`, {
      method: step.method,
      ...(step.body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(step.body) }),
    });
    out.push({
      name: step.name,
      request: {
        method: step.method,
        path: step.path,
        ...(step.body === undefined ? {} : { body: step.body }),
      },
      response: {
        status: res.status,
        contentType: res.headers.get('content-type') ?? '',
        body: (await res.text()).replaceAll(ctx.repo, '{repo}'),
      },
    });
  }
  return out;
}
