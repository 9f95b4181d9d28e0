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

let registrationAgent: Agent | undefined;

/**
 * The process-wide dispatcher of registrations: a registration's POST lasts as long as the plugin's download
 * (minutes), so on the shared pool a few of them to one replica would hold every socket and its describe, scale
 * and ready calls would wait behind them, holding reconciles. Their number is bounded by the operator's
 * registration slots, not here.
 */
export function sharedRegistrationAgent(): Agent {
  registrationAgent ??= createModelServerAgent({ connections: 1_000 });
  return registrationAgent;
}

/** Closes the process-wide dispatcher (shutdown); a later client creates a new one. */
export async function closeSharedModelServerAgent(): Promise<void> {
  const a = sharedAgent;
  const r = registrationAgent;
  sharedAgent = undefined;
  registrationAgent = undefined;
  await Promise.all([a?.close(), r?.close()]);
}
