/**
 * TorchServe clients of the replicas of every ServedModel, with their management-token sources. A token source
 * lives as long as its replica (its renewal is single-flight), so it is kept per (owner uid, endpoint, Secret key)
 * and pruned when the replica or the owner goes: pods churn, and a returning endpoint gets a fresh one.
 */
import type { Dispatcher } from 'undici';
import type { ReplicaAccess, ReplicaOwner, ReplicaRef } from '../driver.ts';
import { podKey, type SecretValue } from '../secrets.ts';
import { secretToken, type TokenSource } from './auth.ts';
import { ModelServerClient } from './client.ts';

export class ReplicaClients {
  private readonly secret: SecretValue;
  private readonly dispatcher: Dispatcher | undefined;
  /** By uid, then by `endpoint|secret|key`. */
  private readonly tokens = new Map<string, Map<string, TokenSource>>();

  constructor(secret: SecretValue, dispatcher?: Dispatcher) {
    this.secret = secret;
    this.dispatcher = dispatcher;
  }

  get(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ModelServerClient {
    const ref = access.tokenSecretRef;
    let token: TokenSource | undefined;
    if (ref) {
      const { key } = podKey(ref, replica);
      let mine = this.tokens.get(owner.uid);
      if (!mine) this.tokens.set(owner.uid, (mine = new Map()));
      const id = `${replica.endpoint}|${ref.name}|${key}`;
      token = mine.get(id);
      if (!token) {
        token = secretToken(() => this.secret(owner.namespace, { name: ref.name, key }));
        mine.set(id, token);
      }
    }
    return new ModelServerClient({
      baseURL: replica.endpoint,
      pluginPath: access.pluginPath,
      token,
      ...(this.dispatcher ? { dispatcher: this.dispatcher } : {}),
    });
  }

  /** Drops the token sources of `uid` whose endpoint is not in `keep` (all of them without `keep`). */
  prune(uid: string, keep?: ReadonlySet<string>): void {
    const mine = this.tokens.get(uid);
    if (!mine) return;
    if (keep) for (const id of mine.keys()) if (!keep.has(id.slice(0, id.indexOf('|')))) mine.delete(id);
    if (!keep || mine.size === 0) this.tokens.delete(uid);
  }

  /** How many token sources are kept (over all owners). */
  get size(): number {
    let n = 0;
    for (const m of this.tokens.values()) n += m.size;
    return n;
  }
}
