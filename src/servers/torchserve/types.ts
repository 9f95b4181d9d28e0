/** What the model-server client takes and gives (its wire formats are in wire.ts). */
import type { Dispatcher } from 'undici';
import type { TokenSource } from './auth.ts';
import type { ModelSummary } from './wire.ts';

export interface RegisterRequest {
  /** Object key in the model store bucket, sent as `file_name` to the plugin. */
  fileName: string;
  modelName?: string;
  runtime?: string;
  handler?: string;
  batchSize?: number;
  /** Milliseconds. */
  maxBatchDelay?: number;
  /** Seconds. */
  responseTimeout?: number;
  /** Seconds (TorchServe 0.12+). */
  startupTimeout?: number;
  /** Default (server side) 0: the seed's flow registers with 0 workers and scales afterwards. */
  initialWorkers?: number;
  synchronous?: boolean;
}

export interface RegisterResult {
  httpStatus: number;
  /** The server's message. */
  status: string;
  /** From the registration message `Model "X" Version: V registered with N initial workers`, when present. */
  modelName?: string | undefined;
  version?: string | undefined;
  initialWorkers?: number | undefined;
  /** 202/206: workers were requested with the registration and are not all started yet. */
  workersPending: boolean;
  /** Peer proxy task id of the download (p2p plugin). */
  taskID?: string | undefined;
  /** Whether the download was served from the node's peer cache (p2p plugin); undefined when not known (the
   *  download did not go through P2P, or the plugin does not say). */
  localHit?: boolean | undefined;
  /** The plugin is downloading this object key for an earlier request: nothing registered yet, ask again later. */
  inProgress?: boolean;
}

export interface ScaleRequest {
  minWorker: number;
  /** Default (server side): minWorker. */
  maxWorker?: number;
  /** Server default false: answer 202 at once. True: wait for the workers (200, or 206 still in progress). */
  synchronous?: boolean;
}

export interface ScaleResult {
  httpStatus: number;
  status: string;
  /** 202 accepted (async), 200 scaled (sync, done), 206 in progress (sync, not done). */
  state: 'accepted' | 'scaled' | 'inProgress';
}

export interface StatusResult {
  httpStatus: number;
  status: string;
}

export interface ModelListPage {
  models: ModelSummary[];
  nextPageToken?: string | undefined;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Overrides the client's time-out for this call (whole request: connect, headers and body). */
  timeoutMs?: number;
}

export interface ModelServerClientOptions {
  /** Management base URL of one replica, e.g. `http://10.0.0.7:8081`. */
  baseURL: string | URL;
  /** Path of the endpoint plugin: `p2p` (default) or `dragonfly` (older third-party plugin). */
  pluginPath?: string;
  /** Management key: a fixed key or a {@link TokenSource}. None: no Authorization header. */
  token?: string | TokenSource;
  /** Shared connection pool. Default: {@link sharedModelServerPool}. */
  dispatcher?: Dispatcher;
  /** Per-request time-out. Default 30 s. */
  timeoutMs?: number;
  /** Time-out of register (the plugin downloads the model before answering). Default 30 min. */
  registerTimeoutMs?: number;
  /** Largest response body read. Default 16 MiB. */
  maxResponseBytes?: number;
}
