/**
 * The peer-proxy emulator's options and public shape (see peer-proxy.ts, which re-exports them), and the shapes
 * its cache and fills share.
 */
import type { ServerResponse } from 'node:http';
import type { TaskIdRule } from '../../src/storage/taskid.ts';

/** The stock dfdaemon configuration's proxy.rules: container image blobs only. */
export const DAEMON_STOCK_RULES: readonly RegExp[] = [/blobs\/sha256.*/];

export interface PeerProxyOptions {
  host?: string /*127.0.0.1*/;
  port?: number /*0 = free*/;
  /** URLs routed through P2P without the header, as the daemon's proxy.rules; default DAEMON_STOCK_RULES. */
  rules?: RegExp[];
  /** Whose task id rule the emulated daemon follows; default DEFAULT_TASK_ID_RULE (client 1.4.2). */
  daemonVersion?: TaskIdRule;
  /**
   * Not a peer daemon but a plain forward proxy: nothing goes through P2P, whatever the rules and headers (a
   * baseline for direct downloads of a client that always sends X-Dragonfly-Use-P2P, like the plugin).
   */
  forwardOnly?: boolean;
  defaultFilter?: string[] /*used when a request has no filter header*/;
  parent?: string /*base URL of another PeerProxy acting as a remote peer: on a local miss ask it by task id before the origin*/;
  cacheDir?: string;
}

export interface PeerProxyStats {
  /** Client requests through the proxy (internal /peer routes excluded). */
  requests: number;
  /** Requests this peer sent to origins (cache fills, preheats, direct forwards). */
  originRequests: number;
  /** Body bytes received from origins. */
  originBytes: number;
  /** localHits + remoteHits. */
  cacheHits: number;
  localHits: number;
  remoteHits: number;
  /** P2P requests that had to go to the origin. */
  cacheMisses: number;
  /** preheat() calls (a seed peer's downloads for the manager). */
  preheats: number;
  /** Tasks served to other peers through /peer/tasks/<id>. */
  servedToPeers: number;
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  taskID?: string;
  cacheHit: boolean;
  status: number;
}

export type PeerFailureMode = 'backend' | 'proxy' | 'dfdaemon' | 'reset';

export interface PreheatOptions {
  filter?: string[];
  tag?: string;
  application?: string;
  pieceLength?: number;
  headers?: Record<string, string>;
}

export interface PeerProxy {
  url: string;
  port: number;
  stats: PeerProxyStats;
  requests: RecordedRequest[];
  hasTask(taskID: string): boolean;
  preheat(url: string, opts?: PreheatOptions): Promise<{ taskID: string; bytes: number }>;
  failNext(count: number, mode: PeerFailureMode): void;
  /** The next `count` preheat() calls fail (a seed peer that cannot download). */
  failNextPreheats(count: number): void;
  /** Task ids currently cached. */
  tasks(): string[];
  cacheDir: string;
  reset(): void /*clear cache+stats*/;
  close(): Promise<void>;
}

/** Error of preheat(): origin answered non-2xx, was unreachable, or a failure was injected. */
export class PeerProxyError extends Error {
  readonly status: number;
  readonly errorType: 'backend' | 'proxy' | 'dfdaemon';
  constructor(message: string, status: number, errorType: 'backend' | 'proxy' | 'dfdaemon') {
    super(message);
    this.name = 'PeerProxyError';
    this.status = status;
    this.errorType = errorType;
  }
}

export interface Entry {
  size: number;
  contentType?: string;
  etag?: string;
  lastModified?: string;
}

export type Source = 'origin' | 'parent';

export type Fill =
  | { ok: true; entry: Entry; source: Source }
  | { ok: false; status: number; headers: Record<string, string>; body: Buffer; errorType: 'backend' };

/** The response of the request that starts a fill, which the fill answers itself while it downloads. */
export interface Live {
  res: ServerResponse;
  /** Set by the fill once the source answered 200 and it took the response over. */
  started: boolean;
  /** Accounting of the request, run when the source is known and before any byte goes to the client. */
  onStart(source: Source): void;
}

export function newStats(): PeerProxyStats {
  return {
    requests: 0,
    originRequests: 0,
    originBytes: 0,
    cacheHits: 0,
    localHits: 0,
    remoteHits: 0,
    cacheMisses: 0,
    preheats: 0,
    servedToPeers: 0,
  };
}
