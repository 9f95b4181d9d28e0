/**
 * The pooled undici dispatcher shared by the clients of many replicas: a fan-out to hundreds of replicas keeps a
 * bounded number of sockets per replica.
 */
import { Agent } from 'undici';

export interface ModelServerAgentOptions {
  /** Sockets per replica. Default 4. */
  connections?: number;
  keepAliveTimeoutMs?: number;
  connectTimeoutMs?: number;
}

/** A pooled dispatcher for many replicas (one pool of `connections` sockets per origin). */
export function createModelServerAgent(opts: ModelServerAgentOptions = {}): Agent {
  return new Agent({
    connections: opts.connections ?? 4,
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 4_000,
    connect: { timeout: opts.connectTimeoutMs ?? 5_000 },
  });
}

let sharedAgent: Agent | undefined;

/** The process-wide dispatcher used by clients that are not given one. */
export function sharedModelServerAgent(): Agent {
  sharedAgent ??= createModelServerAgent();
  return sharedAgent;
}

/** Closes the process-wide dispatcher (shutdown); a later client creates a new one. */
export async function closeSharedModelServerAgent(): Promise<void> {
  const a = sharedAgent;
  sharedAgent = undefined;
  await a?.close();
}
