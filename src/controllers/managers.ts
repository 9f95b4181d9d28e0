/**
 * Which P2P manager a resource talks to, with which credentials, and one pooled client per manager.
 * A resource's `spec.manager` wins; otherwise the operator's `--manager-*` defaults apply.
 */
import { createHash } from 'node:crypto';
import { parseDuration, type ManagerRef } from '../api/index.ts';
import type { OperatorConfig } from '../config.ts';
import type { ManagerAuth } from '../manager/auth.ts';
import { ManagerClient } from '../manager/client.ts';
import type { SecretReader } from './secrets.ts';

/** No manager is named by the resource and the operator has no default. */
export class ManagerNotConfiguredError extends Error {
  constructor() {
    super('no manager: set spec.manager.url, or start the operator with --manager-url');
    this.name = 'ManagerNotConfiguredError';
  }
}

export interface ResolvedManager {
  url: string;
  apiPath: '/api/v1' | '/oapi/v1';
  argsDialect: 'current' | 'legacy';
  requestTimeoutMs: number;
  auth: ManagerAuth;
}

/** Reads the credentials a manager reference names. Throws SecretNotFoundError / ManagerNotConfiguredError. */
export async function resolveManager(
  ref: ManagerRef | undefined,
  namespace: string,
  config: OperatorConfig,
  secrets: SecretReader,
  signal?: AbortSignal,
): Promise<ResolvedManager> {
  if (ref) {
    let auth: ManagerAuth = { type: 'none' };
    if (ref.tokenSecretRef) {
      auth = { type: 'token', token: await secrets.value(namespace, ref.tokenSecretRef, signal) };
    } else if (ref.signInSecretRef) {
      const name = ref.signInSecretRef.name;
      auth = {
        type: 'signIn',
        username: await secrets.value(namespace, { name, key: 'username' }, signal),
        password: await secrets.value(namespace, { name, key: 'password' }, signal),
      };
    }
    return {
      url: ref.url,
      apiPath: ref.apiPath,
      argsDialect: ref.argsDialect,
      requestTimeoutMs: parseDuration(ref.requestTimeout),
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
