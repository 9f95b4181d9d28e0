/**
 * How drivers read a replica's credentials: a key of a Secret in the ServedModel's namespace, where `{pod}` in the
 * key stands for the replica's pod name (a per-pod key: every model-server process draws its own keys).
 */
import type { ReplicaOwner, ReplicaRef } from './driver.ts';

/** Reads one key of a Secret (cached for a few seconds by the caller, as every request asks for the token). */
export type SecretValue = (namespace: string, ref: { name: string; key: string }) => Promise<string>;

/** A Secret's name and key. */
export interface SecretKey {
  name: string;
  key: string;
}

/** `ref` for `replica`: `{pod}` in its key replaced by the pod's name. */
export function podKey(ref: SecretKey, replica: ReplicaRef): SecretKey {
  return { name: ref.name, key: ref.key.replaceAll('{pod}', replica.pod ?? '') };
}

/** The reader of `ref`'s value for one replica of `owner`, read per call; undefined without `ref`. */
export function replicaSecret(
  secret: SecretValue,
  owner: ReplicaOwner,
  replica: ReplicaRef,
  ref: SecretKey,
): () => Promise<string>;
export function replicaSecret(
  secret: SecretValue,
  owner: ReplicaOwner,
  replica: ReplicaRef,
  ref: SecretKey | undefined,
): (() => Promise<string>) | undefined;
export function replicaSecret(
  secret: SecretValue,
  owner: ReplicaOwner,
  replica: ReplicaRef,
  ref: SecretKey | undefined,
): (() => Promise<string>) | undefined {
  if (!ref) return undefined;
  const key = podKey(ref, replica);
  return () => secret(owner.namespace, key);
}
