/**
 * Which P2P manager a resource talks to, with which credentials, and one pooled client per manager.
 * A resource's `spec.manager` wins: a ClusterManager it names (`clusterManagerRef`) or a `url`; otherwise the
 * operator's `--manager-*` defaults apply. Before any Secret is read, the reach policy (src/policy/reach.ts) decides
 * whether the resource may use that manager at all: a manager outside it is never sent a request.
 */
import { createHash } from 'node:crypto';
import { ClusterManager, GVR, parseDuration, type ManagerRef } from '../api/index.ts';
import type { OperatorConfig } from '../config.ts';
import type { ManagerAuth } from '../manager/auth.ts';
import { ManagerClient } from '../manager/client.ts';
import { clusterManagerReach, managerURLReach, type Reach, type ReachReason } from '../policy/reach.ts';
import type { ControllerContext, KubeObject } from '../runtime/index.ts';
import type { SecretReader } from './secrets.ts';

/** No manager is named by the resource and the operator has no default. */
export class ManagerNotConfiguredError extends Error {
  constructor() {
    super('no manager: set spec.manager.url, or start the operator with --manager-url');
    this.name = 'ManagerNotConfiguredError';
  }
}

/** The resource may not use the manager it names (the reach policy's rule is the reason). Carries no secret. */
export class ReachDeniedError extends Error {
  readonly reason: ReachReason;
  constructor(reason: ReachReason, message: string) {
    super(message);
    this.name = 'ReachDeniedError';
    this.reason = reason;
  }
}

export interface ResolvedManager {
  url: string;
  apiPath: '/api/v1' | '/oapi/v1';
  argsDialect: 'current' | 'legacy';
  requestTimeoutMs: number;
  auth: ManagerAuth;
}

/** What manager resolution reads of the cluster: the ClusterManagers and, for their selectors, namespace labels. */
export interface ManagerDirectory {
  /** Undefined when there is none (or it cannot be read: then no resource may use it). */
  clusterManager(name: string): Promise<ClusterManager | undefined>;
  /** Undefined when unknown (cannot be read): a selector then selects nothing. */
  namespaceLabels(namespace: string): Promise<Record<string, string> | undefined>;
}

/** How long a ClusterManager or a namespace's labels are reused: an admin's change applies within this time. */
const DIRECTORY_TTL_MS = 30_000;

/**
 * The directory of each operator context, by its config: resolveManager's callers (the ModelPreheat reconcile, its
 * cache refresh and cleanup) pass the config already, so they need no further argument. Registered by
 * {@link useClusterManagers} when a controller is built.
 */
const directories = new WeakMap<OperatorConfig, ManagerDirectory>();

/**
 * Reads ClusterManagers and namespace labels one by one when a resource names a ClusterManager, each kept for
 * DIRECTORY_TTL_MS and read once for concurrent callers (so no caller's signal ends a shared read). GETs, not a
 * watch: an operator scoped to one namespace (no cluster-wide rights) must still start, and there only resources
 * that name a ClusterManager are refused. Idempotent per context.
 */
export function useClusterManagers(ctx: Pick<ControllerContext, 'kube' | 'config'>): ManagerDirectory {
  const existing = directories.get(ctx.config);
  if (existing) return existing;
  function cached<T>(read: (name: string) => Promise<T>): (name: string) => Promise<T> {
    const entries = new Map<string, { at: number; value: Promise<T> }>();
    return (name) => {
      const now = Date.now();
      for (const [k, e] of entries) if (now - e.at >= DIRECTORY_TTL_MS) entries.delete(k);
      let entry = entries.get(name);
      if (!entry) entries.set(name, (entry = { at: now, value: read(name) }));
      return entry.value;
    };
  }
  const directory: ManagerDirectory = {
    clusterManager: cached((name) =>
      ctx.kube
        .resource<KubeObject>(GVR.clusterManagers)
        .get(undefined, name)
        .then((o) => {
          const parsed = ClusterManager.safeParse(o);
          return parsed.success ? parsed.data : undefined;
        })
        .catch(() => undefined),
    ),
    namespaceLabels: cached((namespace) =>
      ctx.kube
        .resource<KubeObject>(GVR.namespaces)
        .get(undefined, namespace)
        .then((n) => n.metadata.labels ?? {})
        .catch(() => undefined),
    ),
  };
  directories.set(ctx.config, directory);
  return directory;
}

/**
 * Whether a namespaced resource may use the manager `ref` names (the operator's default needs no check: the admin
 * chose it). `field` is where the spec names it, for the message.
 */
export async function managerReach(
  ref: ManagerRef | undefined,
  namespace: string,
  config: OperatorConfig,
  field = 'spec.manager',
): Promise<Reach & { clusterManager?: ClusterManager }> {
  if (!ref) return { allowed: true };
  if (ref.clusterManagerRef) {
    const name = ref.clusterManagerRef.name;
    const directory = directories.get(config);
    const cm = await directory?.clusterManager(name);
    const labels = cm?.spec.namespaceSelector ? await directory!.namespaceLabels(namespace) : undefined;
    const reach = clusterManagerReach(name, `${field}.clusterManagerRef`, namespace, cm, labels);
    return reach.allowed ? { ...reach, clusterManager: cm! } : reach;
  }
  return managerURLReach(ref.url!, `${field}.url`, {
    managerHosts: config.allowedManagerHosts,
    endpointHosts: config.allowedEndpointHosts,
  });
}

/**
 * Reads the credentials a manager reference names. Throws ReachDeniedError (before any Secret is read) /
 * SecretNotFoundError / ManagerNotConfiguredError.
 */
export async function resolveManager(
  ref: ManagerRef | undefined,
  namespace: string,
  config: OperatorConfig,
  secrets: SecretReader,
  signal?: AbortSignal,
): Promise<ResolvedManager> {
  if (ref) {
    const reach = await managerReach(ref, namespace, config, 'spec.manager');
    if (!reach.allowed) throw new ReachDeniedError(reach.reason, reach.message);
    const cm = reach.clusterManager?.spec;
    // A ClusterManager's Secrets live in the operator's namespace, where tenants cannot read or write them.
    const source = cm ?? ref;
    const secretNamespace = cm ? config.leaderElectionNamespace : namespace;
    let auth: ManagerAuth = { type: 'none' };
    if (source.tokenSecretRef) {
      auth = { type: 'token', token: await secrets.value(secretNamespace, source.tokenSecretRef, signal) };
    } else if (source.signInSecretRef) {
      const name = source.signInSecretRef.name;
      auth = {
        type: 'signIn',
        username: await secrets.value(secretNamespace, { name, key: 'username' }, signal),
        password: await secrets.value(secretNamespace, { name, key: 'password' }, signal),
      };
    }
    const conn = cm ?? ref;
    return {
      url: cm ? cm.url : ref.url!,
      apiPath: conn.apiPath,
      argsDialect: conn.argsDialect,
      requestTimeoutMs: parseDuration(conn.requestTimeout),
      auth,
    };
  }
  if (!config.managerUrl) throw new ManagerNotConfiguredError();
  let auth: ManagerAuth = { type: 'none' };
  if (config.managerTokenSecret) {
    const [ns, name] = config.managerTokenSecret.includes('/')
      ? (config.managerTokenSecret.split('/') as [string, string])
      : [config.leaderElectionNamespace ?? namespace, config.managerTokenSecret];
    auth = {
      type: 'token',
      token: await secrets.value(ns, { name, key: config.managerTokenSecretKey }, signal),
    };
  }
  return {
    url: config.managerUrl,
    apiPath: config.managerApiPath,
    argsDialect: 'current',
    requestTimeoutMs: 30_000,
    auth,
  };
}

/**
 * One ManagerClient per (manager, credentials): clients pool connections and share a JWT, so resources using
 * the same manager share one. Keys hold a hash of the credentials, never the credentials themselves.
 */
export class ManagerClients {
  private readonly clients = new Map<string, ManagerClient>();
  private readonly maxClients: number;

  constructor(maxClients = 64) {
    this.maxClients = maxClients;
  }

  get(m: ResolvedManager): ManagerClient {
    const id = createHash('sha256').update(JSON.stringify(m)).digest('hex');
    let client = this.clients.get(id);
    if (client) {
      // Most recently used last, so eviction below drops the least recently used.
      this.clients.delete(id);
      this.clients.set(id, client);
      return client;
    }
    client = new ManagerClient({
      baseURL: m.url,
      apiPath: m.apiPath,
      argsDialect: m.argsDialect,
      requestTimeoutMs: m.requestTimeoutMs,
      auth: m.auth,
    });
    this.clients.set(id, client);
    if (this.clients.size > this.maxClients) {
      const [oldestID, oldest] = this.clients.entries().next().value!;
      this.clients.delete(oldestID);
      void oldest.close();
    }
    return client;
  }

  async close(): Promise<void> {
    await Promise.all([...this.clients.values()].map((c) => c.close()));
    this.clients.clear();
  }
}
