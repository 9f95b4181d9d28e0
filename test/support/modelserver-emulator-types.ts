/**
 * The model-server emulator's options and public shape (see modelserver-emulator.ts, which re-exports them), and
 * its zero counters.
 */

// ---------------------------------------------------------------------------------------------------------------
// Options and public shape

export interface ModelServerEmulatorAuth {
  managementKey?: string;
  inferenceKey?: string;
  apiKey?: string;
  /** Lifetime of management/inference keys (`token_expiration_min`). Default 60 minutes. */
  expiryMs?: number;
}

export type FailureInjection =
  /** Connection refused: the server stops listening until the failure is cleared. */
  | { mode: 'down' }
  /** Answer `status` (default 500) with a TorchServe error body, `times` times (default: until cleared). */
  | { mode: 'error'; status?: number; type?: string; message?: string; routes?: string[]; times?: number }
  /** Delay answers by `delayMs`. */
  | { mode: 'slow'; delayMs: number; routes?: string[]; times?: number };

export interface ModelServerEmulatorOptions {
  /** Version of registered models (the archive's). Default "1.0". */
  modelVersion?: string | ((fileName: string) => string);
  /** Model name when the request has no model_name (the archive's). Default: file name without `.mar`. */
  modelName?: (fileName: string) => string;
  /**
   * An archive this server cannot load: the message TorchServe's 400 InvalidModelException carries (as for a broken
   * manifest or handler), or undefined to register it. Default: every archive loads.
   */
  rejectArchive?: (fileName: string) => string | undefined;
  /** Added to every registration (after the download). Benchmarks use 200 ms. Default 0. */
  registrationLatencyMs?: number;
  /** Time a worker shows UNLOADING before READY. Default 50 ms. */
  workerStartMs?: number;
  /** Longest wait of a synchronous scale before it answers 206. Default 10 s. */
  syncScaleWaitMs?: number;
  /** Installed plugins (first path segment). Default both `p2p` and `dragonfly`. */
  plugins?: Array<'p2p' | 'dragonfly'>;
  /** `enable_model_api`: gates `POST /models` and `DELETE /models/...` (405 when off). Default true. */
  enableModelApi?: boolean;
  /** The dragonfly plugin calls the 11-parameter handleRegister: on 0.12 that is a NoSuchMethodError (500). */
  legacyPluginSignatureMismatch?: boolean;
  /** Peer proxy for plugin downloads (`http://127.0.0.1:port`). Absent: direct GET. */
  proxyURL?: string;
  /** URL of an object key. Absent: the download is skipped (registration only). */
  objectURL?: (fileName: string) => string;
  /** Query parameters filtered from the task id; sent in both filter headers. Default: the plugin's s3 default (src/storage/objecturl.ts). */
  filter?: string[];
  /** Extra headers of plugin downloads (the plugin configuration's `header`). */
  headers?: Record<string, string>;
  tag?: string;
  application?: string;
  /** Token authorization: on (`true` or keys), off by default (`--disable-token-auth`). */
  auth?: boolean | ModelServerEmulatorAuth;
  /** Also write key_file.json here (mode 600) whenever it changes, like TorchServe in its working directory. */
  keyFilePath?: string;
  /** Port to listen on. Default: any free port. */
  port?: number;
  /** Loopback address to listen on (a replica of its own, e.g. 127.0.90.3, beside others at the same ports).
   *  Default 127.0.0.1. */
  host?: string;
  /**
   * Serve the inference API (`POST /predictions/{name}/{version}`) on this port of `host` (0: any free port), as
   * TorchServe does on its inference address; absent: no inference API.
   */
  inferencePort?: number;
  /**
   * What the handler of a model answers to a prediction (the request's JSON body, undefined when not JSON): the JSON
   * of a 200. Default `{model, version, input}`. A version answering wrongly is a function that says so by version.
   */
  predict?: (model: string, version: string, input: unknown) => unknown;
  now?: () => number;
}

export interface ModelServerEmulatorStats {
  /** Requests by route, e.g. `POST /{plugin}/models`, `GET /models/{name}`, `PUT /models/{name}`. */
  requests: Record<string, number>;
  totalRequests: number;
  registrationAttempts: number;
  registrations: number;
  conflicts: number;
  scales: number;
  setDefaults: number;
  unregistrations: number;
  tokenRotations: number;
  authFailures: number;
  downloads: number;
  downloadBytes: number;
  injectedFailures: number;
  /** p2p plugin: POSTs answered 202 DownloadInProgress (their key was downloading for an earlier request). */
  inProgressAnswers: number;
  /** p2p plugin: POSTs that started a download + registration (the others were refused or shared one). */
  pluginRegistrationsStarted: number;
  /** Inference API: predictions asked for, by `name/version`. */
  predictions: Record<string, number>;
}

export interface DownloadRecord {
  url: string;
  viaProxy: boolean;
  status: number;
  bytes: number;
  taskID?: string | undefined;
  cacheHit: boolean;
}

export interface EmulatedWorker {
  id: string;
  startTime: string;
  readyAt: number;
  pid: number;
}

export interface EmulatedModel {
  modelName: string;
  modelVersion: string;
  modelUrl: string;
  runtime: string;
  handler?: string | undefined;
  batchSize: number;
  maxBatchDelay: number;
  responseTimeout: number;
  startupTimeout: number;
  minWorkers: number;
  maxWorkers: number;
  workers: EmulatedWorker[];
  registeredAt: number;
}

export interface ModelServerEmulator {
  /** Management base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  readonly port: number;
  /** The inference API's port (options.inferencePort); 0 without one. */
  readonly inferencePort: number;
  readonly stats: ModelServerEmulatorStats;
  readonly downloads: DownloadRecord[];
  /** key_file.json as TorchServe writes it (pretty JSON); undefined when token auth is off. */
  keyFile(): string | undefined;
  /** Current keys; undefined when token auth is off. */
  keys(): { management: string; inference: string; api: string } | undefined;
  /** Makes the management key expire now (the server rejects it until rotated). */
  expireManagementKey(): void;
  /** Versions of a model (copies), default first; empty when absent. */
  model(name: string): EmulatedModel[];
  defaultVersion(name: string): string | undefined;
  /** Names of all registered models. */
  modelNames(): string[];
  /** Sets or clears (undefined) the injected failure. */
  inject(failure: FailureInjection | undefined): Promise<void>;
  /** A restarted process: every model gone; new keys when `rotateKeys` (as a real restart would). */
  wipe(opts?: { rotateKeys?: boolean }): void;
  resetStats(): void;
  close(): Promise<void>;
}

export interface ModelServerFleet {
  readonly instances: ModelServerEmulator[];
  readonly urls: string[];
  /** Sum of every instance's counters. */
  stats(): ModelServerEmulatorStats;
  close(): Promise<void>;
}

export function emptyStats(): ModelServerEmulatorStats {
  return {
    requests: {},
    totalRequests: 0,
    registrationAttempts: 0,
    registrations: 0,
    conflicts: 0,
    scales: 0,
    setDefaults: 0,
    unregistrations: 0,
    tokenRotations: 0,
    authFailures: 0,
    downloads: 0,
    downloadBytes: 0,
    injectedFailures: 0,
    inProgressAnswers: 0,
    pluginRegistrationsStarted: 0,
    predictions: {},
  };
}
