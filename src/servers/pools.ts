/**
 * The pooled undici dispatchers shared by the clients of every replica (model servers and their agents): a fan-out
 * to hundreds of replicas keeps a bounded number of sockets per replica. The operator closes them at shutdown
 * ({@link closeModelServerPools}).
 */
import { Agent } from 'undici';

export interface ModelServerPoolOptions {
  /** Sockets per replica. Default 4. */
  connections?: number;
  keepAliveTimeoutMs?: number;
  connectTimeoutMs?: number;
}

/** A pooled dispatcher for many replicas (one pool of `connections` sockets per origin). */
export function createModelServerPool(opts: ModelServerPoolOptions = {}): Agent {
  return new Agent({
    connections: opts.connections ?? 4,
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 4_000,
    connect: { timeout: opts.connectTimeoutMs ?? 5_000 },
  });
}

let sharedPool: Agent | undefined;

/** The process-wide dispatcher used by clients that are not given one. */
export function sharedModelServerPool(): Agent {
  sharedPool ??= createModelServerPool();
  return sharedPool;
}

let registrationPool: Agent | undefined;

/**
 * The process-wide dispatcher of registrations: a registration's POST lasts as long as the plugin's download
 * (minutes), so on the shared pool a few of them to one replica would hold every socket and its describe, scale
 * and ready calls would wait behind them, holding reconciles. Their number is bounded by the operator's
 * registration slots, not here.
 */
export function sharedRegistrationPool(): Agent {
  registrationPool ??= createModelServerPool({ connections: 1_000 });
  return registrationPool;
}

/** Closes the process-wide dispatchers (shutdown); a later client creates new ones. */
export async function closeModelServerPools(): Promise<void> {
  const a = sharedPool;
  const r = registrationPool;
  sharedPool = undefined;
  registrationPool = undefined;
  await Promise.all([a?.close(), r?.close()]);
}
