/**
 * The seam between the ServedModel controller and a kind of model server. The controller knows only this
 * interface: it finds replicas, decides the rollout and writes status; a driver talks to one replica's management
 * API (TorchServe + the peerload plugin is the first, `src/servers/torchserve/`). A new kind of model server is a
 * new folder with a driver, registered in {@link ModelServerDrivers}: no controller changes.
 */
import type { ModelVersionSpec } from '../place/spec.ts';
import type { ModelLayout, Scaling } from '../api/drivers.ts';

export type { ModelLayout } from '../api/drivers.ts';

/** One model-server replica as the controller found it. */
export interface ReplicaRef {
  /** Management base URL, e.g. http://10.0.0.7:8081: the identity of the replica. */
  endpoint: string;
  pod?: string | undefined;
  podUID?: string | undefined;
}

/** The object a replica serves a model for, as far as a driver needs it (per-replica credentials). */
export interface ReplicaOwner {
  /** The ServedModel's uid (or `namespace/name` when it has none yet): per-replica state is kept under it. */
  uid: string;
  namespace: string;
}

/** What a registration needs on the pod: how to reach its management API and with which credentials. */
export interface ReplicaAccess {
  /** The server's registration entry point (TorchServe: the endpoint plugin's path). */
  pluginPath?: string | undefined;
  /** The Secret key holding the management credentials; `{pod}` in `key` stands for the pod name. */
  tokenSecretRef?: { name: string; key: string } | undefined;
  /** The `peerload agent` beside the server, for drivers that place directories ({@link ModelFiles}). */
  agent?: AgentAccess | undefined;
}

/** How a driver reaches a replica's `peerload agent`: on the replica's host, the token from a Secret. */
export interface AgentAccess {
  /** The agent's port on the replica's address (the pod's IP, as the server's). */
  port: number;
  /** Scheme toward the agent; default http. */
  scheme?: 'http' | 'https' | undefined;
  /** The Secret key holding the agent's token (`--token-file`); `{pod}` in `key` stands for the pod name. */
  tokenSecretRef: { name: string; key: string };
  /** The agent's `--root` as the model server's container mounts it, for servers that load a directory by its
   *  path (vLLM); default {@link DEFAULT_MODEL_ROOT}. */
  root?: string | undefined;
}

/** Where a model server's pod mounts the agent's model root when nothing says otherwise. */
export const DEFAULT_MODEL_ROOT = '/models';

/** One version of a model as a replica serves it. */
export interface ModelVersion {
  version: string;
  minWorkers: number;
  maxWorkers: number;
  /** Workers that serve requests now (what "ready" means for this server). */
  readyWorkers: number;
  /**
   * Whether the replica's copy came from its node's peer cache, when the server holds a model no registration of
   * the operator's placed (vLLM's base model, fetched before the server started); else the registration says.
   */
  localHit?: boolean | undefined;
}

/**
 * A model that is a directory (safetensors shards, a Triton model repository version, a LoRA adapter): the files
 * a server's `peerload agent` places beside it before the driver loads the model. The same body as the agent's
 * `PUT /v1/models/{name}` less `version`, which the registration gives: object keys the agent signs with its own
 * credentials (no Secret of the ServedModel's namespace travels), and the preheat's task identity (filter, tag,
 * application, piece length) so every file is a hit on the node's peer.
 */
export type ModelFiles = Omit<ModelVersionSpec, 'version'>;

/** What a registration asks for: the archive or the files, the model's name, and the server's own options. */
export interface Registration {
  /** The archive's object key (TorchServe), or for a directory the prefix or first key (for messages). */
  fileName: string;
  /** The model's files, for drivers that place a directory through the agent (absent: one archive). */
  files?: ModelFiles | undefined;
  modelName: string;
  /** The version wanted, when the spec names one (the archive decides otherwise). */
  version?: string | undefined;
  /** Server-specific registration options (TorchServe: handler, runtime, batch size, time-outs). */
  options: Readonly<Record<string, string | number | undefined>>;
}

export interface Registered {
  /** The version the archive registered, when the server says. */
  version?: string | undefined;
  /** Whether the download was served from the node's peer cache; undefined when not known. */
  localHit?: boolean | undefined;
}

export interface Call {
  signal?: AbortSignal | undefined;
  timeoutMs?: number | undefined;
}

/** A long call's reports: `progress` says where it is; `stopping` asks it to start nothing after its request. */
export interface RegisterCall extends Call {
  progress?: ((message: string) => void) | undefined;
  stopping?: AbortSignal | undefined;
}

/** How a failed call reads, for the conditions: the kinds every driver maps its errors to. */
export type FailureKind = 'auth' | 'notFound' | 'conflict' | 'terminal' | 'retryable';

/**
 * A failure of the bytes themselves, not of a server nor of the network: a file that does not hash to the digest its
 * source publishes (`ChecksumMismatch`), an archive with an entry that would leave its directory (`UnsafeArchive`).
 */
export type IntegrityFailure = 'ChecksumMismatch' | 'UnsafeArchive';

export interface Failure {
  kind: FailureKind;
  /** Set for a failure of the placed bytes: its own condition reason (the kind still says whether to retry). */
  integrity?: IntegrityFailure | undefined;
  /** False: the same request fails again until something changes (credentials, archive, model server). */
  retryable: boolean;
  /** Without credentials (the driver redacts what the server says). */
  message: string;
}

/** One replica's management API. Every method rejects with an error its driver's `failure` reads. */
export interface ReplicaServer {
  /** The model's default version (`version` undefined) or the given one, or undefined when not there. */
  describe(model: string, version: string | undefined, call: Call): Promise<ModelVersion | undefined>;
  /** Every version of the model the replica holds (empty when none). */
  versions(model: string, call: Call): Promise<ModelVersion[]>;
  /** Downloads the archive and registers it with no workers; resolves once registered. A registration the server
   *  already holds rejects with a `conflict` failure. */
  register(reg: Registration, call: RegisterCall): Promise<Registered>;
  /** Sets the worker counts of one version. */
  scale(model: string, version: string, workers: { min: number; max: number }, call: Call): Promise<void>;
  /** Makes `version` the default, for servers with versions (absent: one version at a time). */
  setDefault?(model: string, version: string, call: Call): Promise<void>;
  /** Unregisters one version. */
  unregister(model: string, version: string, call: Call): Promise<void>;
  /** Unregisters every version (deletion), in the order the server needs; a model not there is fine. */
  unregisterAll(model: string, call: Call): Promise<void>;
  /**
   * For a server that serves a version as soon as it is loaded (Triton: the newest loaded version answers requests
   * without one), the halves of a registration apart, so that a Staged rollout holds a version without serving it:
   * staging places its files, the switch loads it. Absent: staging is {@link register} with the workers started,
   * the switch {@link setDefault}.
   */
  staging?: Staging | undefined;
  /**
   * Sends one inference request to `version` explicitly (a canary's probe, `spec.rollout.canary.probe`) and returns
   * the answer, read with {@link InferenceRequest.maxBytes} and time bounds; rejects only when no answer came (the
   * driver's `failure` reads why). Absent: the driver sends no probe (its row's `probe` in src/api/drivers.ts).
   */
  probe?(model: string, version: string, req: InferenceRequest, call: Call): Promise<InferenceAnswer>;
}

/** A registration in two halves: see {@link ReplicaServer.staging}. */
export interface Staging {
  /** Places the version's files beside the server (through its agent), loading nothing; resolves once placed. */
  place(reg: Registration, call: RegisterCall): Promise<Registered>;
  /** The versions of the model whose files are in place, loaded or not. */
  placed(model: string, call: Call): Promise<string[]>;
  /**
   * Loads a placed version beside the versions served: once it answers, requests without a version reach it.
   * The versions served before keep serving while it loads and when it fails to; {@link ReplicaServer.unregister}
   * of it afterwards leaves them as they were. A load that fails rejects with a `terminal` failure.
   */
  load(model: string, version: string, call: Call): Promise<void>;
}

/** A canary's inference request, server-neutral: the driver knows the path and the method. */
export interface InferenceRequest {
  /** The JSON body, as the spec wrote it. */
  body: string;
  /** The server's inference port on the replica's address, when it is not the management endpoint's. */
  port?: number | undefined;
  /** The largest answer read; past it the call rejects without holding more (an error answer is cut to it). */
  maxBytes: number;
}

/** What the server answered: its status and, when the body was JSON, the parsed value. */
export interface InferenceAnswer {
  status: number;
  /** The parsed JSON body; undefined when it was empty or not JSON. */
  json?: unknown;
}

export interface ModelServerDriver {
  /** The name it is registered under. */
  readonly name: string;
  /**
   * The layouts its servers load (absent: `archive` only). A ServedModel whose layout the driver does not load is
   * Stalled with {@link layoutRefusal}'s words, before any replica is asked.
   */
  readonly layouts?: readonly ModelLayout[] | undefined;
  /** What `spec.workers` means for its servers (absent: `workers`); a shipped driver's is its row of the
   *  declarations table (src/api/drivers.ts), as its layouts are. */
  readonly scaling?: Scaling | undefined;
  /**
   * Whether its replicas can hold a version without serving it and switch to it in one call: registered and ready
   * while another stays the default, switched with {@link ReplicaServer.setDefault}, or placed and loaded at the
   * switch ({@link ReplicaServer.staging}) (`spec.rollout.strategy: Staged`; absent: false). A shipped driver's is its
   * row's `staging` (src/api/drivers.ts), which the API refuses Staged by.
   */
  readonly stages?: boolean | undefined;
  /**
   * Whether its replicas send a canary's inference probe ({@link ReplicaServer.probe}; absent: false). A shipped
   * driver's is its row's `probe` (src/api/drivers.ts), which the API refuses `spec.rollout.canary.probe` by.
   */
  readonly probes?: boolean | undefined;
  /** Why a layout it does not load is refused, in the server's own terms (default: {@link layoutRefusal}'s). */
  refuseLayout?(layout: ModelLayout): string;
  /** A client of one replica. Per-replica state it keeps (token sources) lives until {@link prune}. */
  replica(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ReplicaServer;
  /** Drops per-replica state of `uid` whose endpoint is not in `keep` (all of it without `keep`). */
  prune(uid: string, keep?: ReadonlySet<string>): void;
  /** How an error of one of its replicas' calls reads; undefined for an error that is not the server's. */
  failure(err: unknown): Failure | undefined;
}

/** A probe's answer from its status and body text: the JSON when the body is JSON. */
export function inferenceAnswer(status: number, text: string): InferenceAnswer {
  try {
    return { status, json: JSON.parse(text) as unknown };
  } catch {
    return { status };
  }
}

/** Why `driver` cannot serve a model of `layout`, or undefined when it can. */
export function layoutRefusal(driver: ModelServerDriver, layout: ModelLayout): string | undefined {
  if ((driver.layouts ?? ['archive']).includes(layout)) return undefined;
  if (driver.refuseLayout) return driver.refuseLayout(layout);
  return layout === 'directory'
    ? `the ${driver.name} model server loads one archive, not a directory: set spec.fileName instead of spec.files`
    : `the ${driver.name} model server loads a directory, not one archive: set spec.files instead of spec.fileName`;
}

/** The drivers the operator knows, by name, with the one used when nothing names another. */
export class ModelServerDrivers {
  private readonly byName = new Map<string, ModelServerDriver>();
  readonly defaultName: string;

  constructor(drivers: readonly ModelServerDriver[], defaultName = drivers[0]?.name ?? '') {
    for (const d of drivers) this.byName.set(d.name, d);
    if (!this.byName.has(defaultName)) throw new TypeError(`no model-server driver named ${defaultName}`);
    this.defaultName = defaultName;
  }

  /** The driver named `name`, or undefined when the operator has none of that name. */
  find(name: string = this.defaultName): ModelServerDriver | undefined {
    return this.byName.get(name);
  }

  /** The names of every driver. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  /** The driver named `name` (the default without one). */
  get(name: string = this.defaultName): ModelServerDriver {
    const d = this.byName.get(name);
    if (!d)
      throw new TypeError(
        `no model-server driver named ${name} (known: ${[...this.byName.keys()].join(', ')})`,
      );
    return d;
  }

  /** Every driver (deletion and pruning ask each one). */
  all(): ModelServerDriver[] {
    return [...this.byName.values()];
  }
}
