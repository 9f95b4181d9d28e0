/**
 * What each model-server driver the operator ships can do, as data: the one place src/api names drivers. The
 * ServedModel schema (its defaults, zod checks and the CEL rules generated from them), the API reference and the
 * drivers themselves (src/servers, which imports this; src/api imports nothing of src/servers) read it, and
 * test/unit/driver-declarations.test.ts holds every driver folder to its row. A new driver is one row here plus its
 * folder in src/servers.
 */

/** How a model reaches a server: one archive object (`spec.fileName`), or a directory of files (`spec.files`). */
export type ModelLayout = 'archive' | 'directory';

/**
 * What `spec.workers` means for a server:
 * - `workers`: per-model worker processes, min and max (TorchServe);
 * - `instances`: the model's instance count, applied by reloading it with an edited config (Triton);
 * - `fixed`: the server has no per-model count (one engine, or a server-wide pool), so the only count is 1 and
 *   a served model is ready with it; any other count is refused at admission.
 */
export type Scaling = 'workers' | 'instances' | 'fixed';

/** Spec fields only some servers read: set with another driver they are refused rather than ignored. */
export type DriverOption = 'registration';

export interface DriverDeclaration {
  /** The server's own name, for messages. */
  server: string;
  /** The endpoint plugin in the server (`modelServer.pluginPath`) does the download and registration. */
  plugin: boolean;
  /** The `peerload agent` beside the server (`modelServer.agent`): required, optional (only some models need
   *  it) or unused. */
  agent: 'required' | 'optional' | 'unused';
  layouts: readonly ModelLayout[];
  scaling: Scaling;
  /** The spec fields only this server reads. */
  options: readonly DriverOption[];
  /**
   * Whether a replica can hold a new version registered and ready without serving it, and switch to it in one
   * short call (`spec.rollout.strategy: Staged`); `false` with the reason, in the server's terms, for the API's
   * refusal.
   */
  staging: true | { refused: string };
  /**
   * Whether the driver sends a canary's inference probe (`spec.rollout.canary.probe`, {@link ReplicaServer.probe} in
   * src/servers/driver.ts): the request it makes of one version, and whether it needs `probe.port` (`required`: an
   * inference port other than the management endpoint's) or sends to the endpoint itself (`unused`); refused with
   * the reason, for the API's refusal.
   */
  probe: { request: string; port: 'required' | 'unused' } | { refused: string };
  /** One line for the API reference and the `driver` field's description. */
  summary: string;
}

/** The Open Inference Protocol servers answer inference on the endpoint their repository API is found at. */
const OIP_PROBE = {
  request: 'POST /v2/models/{model}/versions/{version}/infer on the endpoint (Open Inference Protocol)',
  port: 'unused',
} as const;

/** Every driver the operator ships; the first is the default of `modelServer.driver`. */
export const DRIVERS = {
  torchserve: {
    server: 'TorchServe',
    plugin: true,
    agent: 'unused',
    layouts: ['archive'],
    scaling: 'workers',
    options: ['registration'],
    // Registered with workers, the default stays the old version; set-default is the switch.
    staging: true,
    // The predictions API is on the inference port, not the management one the replicas are found by.
    probe: {
      request: 'POST /predictions/{model}/{version} on probe.port (the inference API)',
      port: 'required',
    },
    summary: 'archives (.mar), downloaded and registered by the endpoint plugin in TorchServe',
  },
  triton: {
    server: 'Triton',
    plugin: false,
    agent: 'required',
    layouts: ['directory'],
    scaling: 'instances',
    options: [],
    // The newest loaded version serves: the agent places the new version's files (staged), the switch loads them
    // beside the old one, which keeps serving while it loads (and when it fails to).
    staging: true,
    probe: OIP_PROBE,
    summary:
      'model repository directories placed by the peerload agent, loaded through the Open Inference Protocol repository API',
  },
  mlserver: {
    server: 'MLServer',
    plugin: false,
    agent: 'required',
    layouts: ['directory'],
    scaling: 'fixed',
    options: [],
    staging: {
      refused:
        "MLServer's load of a model loads every version placed in its directory and reloads the ones it serves, so the switch would reload the version served too: roll out with strategy Rolling",
    },
    probe: OIP_PROBE,
    summary:
      'model directories placed by the peerload agent, loaded through the Open Inference Protocol repository API',
  },
  vllm: {
    server: 'vLLM',
    plugin: false,
    agent: 'optional',
    layouts: ['directory'],
    scaling: 'fixed',
    options: [],
    staging: {
      refused: 'vLLM holds one version of a name, and loading the new one in place is already the switch',
    },
    probe: {
      refused:
        'the driver sends no inference probe yet (an OpenAI-compatible /v1/completions request naming the adapter is the way)',
    },
    summary:
      'LoRA adapters placed by the peerload agent and loaded at run time (the agent is needed for them); a base model is only checked ready',
  },
} as const satisfies Record<string, DriverDeclaration>;

export type DriverName = keyof typeof DRIVERS;

/** Every declared driver's name, the default first. */
export const DRIVER_NAMES = Object.keys(DRIVERS) as DriverName[];

/** The driver `modelServer.driver` defaults to. */
export const DEFAULT_DRIVER: DriverName = DRIVER_NAMES[0]!;

/** The declaration of `name`, or undefined for a name the operator ships no driver for. */
export function declarationOf(name: string): DriverDeclaration | undefined {
  return Object.hasOwn(DRIVERS, name) ? DRIVERS[name as DriverName] : undefined;
}

/** The names of the drivers whose declaration passes `test`. */
export function driversWhere(test: (d: DriverDeclaration) => boolean): DriverName[] {
  return DRIVER_NAMES.filter((n) => test(DRIVERS[n]));
}

/** `a`, `a and b`, `a, b and c`. */
export function listed(names: readonly string[]): string {
  return names.length < 2 ? (names[0] ?? '') : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}

/** A CEL list literal of strings. */
export const celList = (names: readonly string[]): string => `[${names.map((n) => `'${n}'`).join(', ')}]`;

/** The CEL expression of the driver a ServedModel names, at `path` (the field has a default). */
export const celDriver = (path: string): string => `(has(${path}) ? ${path} : '${DEFAULT_DRIVER}')`;

/** The API reference's table of the drivers (docs/api.md). */
export function driverTable(): string {
  const out = [
    '| driver | server | needs | layouts | `spec.workers` | server-only fields | `Staged` rollout | canary probe |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const name of DRIVER_NAMES) {
    const d: DriverDeclaration = DRIVERS[name];
    const needs = [
      d.plugin ? 'the endpoint plugin' : '',
      d.agent === 'unused' ? '' : `the agent (${d.agent})`,
    ]
      .filter(Boolean)
      .join(', ');
    const scaling = { workers: 'worker processes', instances: 'instances, by a reload', fixed: 'fixed: 1' }[
      d.scaling
    ];
    const options = d.options.map((o) => `\`spec.${o}\``).join(', ') || '—';
    const dflt = name === DEFAULT_DRIVER ? ' (default)' : '';
    const staging = d.staging === true ? 'yes' : `no: ${d.staging.refused}`;
    const probe = 'refused' in d.probe ? `no: ${d.probe.refused}` : `yes: \`${d.probe.request}\``;
    out.push(
      `| \`${name}\`${dflt} | ${d.server}: ${d.summary} | ${needs} | ${d.layouts.join(', ')} | ${scaling} | ${options} | ${staging} | ${probe} |`,
    );
  }
  return out.join('\n');
}
