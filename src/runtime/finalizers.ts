/**
 * Finalizer helpers. Writes are JSON merge patches of `metadata.finalizers` with the object's
 * resourceVersion as a precondition, so a concurrent change of the list is a 409 (retried by the work queue)
 * rather than a lost finalizer. Nothing is sent when the list already has the wanted shape.
 */
import type { KubeClient, Gvr, KubeObject } from './kube.ts';

export function hasFinalizer(obj: KubeObject, finalizer: string): boolean {
  return obj.metadata.finalizers?.includes(finalizer) ?? false;
}

export function isBeingDeleted(obj: KubeObject): boolean {
  return !!obj.metadata.deletionTimestamp;
}

/** Adds `finalizer` when missing. Returns the updated object, or `obj` itself when nothing was written. */
export async function addFinalizer<T extends KubeObject>(
  kube: KubeClient,
  gvr: Gvr,
  obj: T,
  finalizer: string,
  signal?: AbortSignal,
): Promise<T> {
  if (hasFinalizer(obj, finalizer)) return obj;
  return patchFinalizers(kube, gvr, obj, [...(obj.metadata.finalizers ?? []), finalizer], signal);
}

/** Removes `finalizer` when present. Returns the updated object, or `obj` itself when nothing was written. */
export async function removeFinalizer<T extends KubeObject>(
  kube: KubeClient,
  gvr: Gvr,
  obj: T,
  finalizer: string,
  signal?: AbortSignal,
): Promise<T> {
  if (!hasFinalizer(obj, finalizer)) return obj;
  const rest = (obj.metadata.finalizers ?? []).filter((f) => f !== finalizer);
  return patchFinalizers(kube, gvr, obj, rest, signal);
}

function patchFinalizers<T extends KubeObject>(
  kube: KubeClient,
  gvr: Gvr,
  obj: T,
  finalizers: string[],
  signal?: AbortSignal,
): Promise<T> {
  const patch = {
    metadata: {
      ...(obj.metadata.resourceVersion ? { resourceVersion: obj.metadata.resourceVersion } : {}),
      finalizers: finalizers.length ? finalizers : null,
    },
  };
  return kube.resource<T>(gvr).patch(obj.metadata.namespace, obj.metadata.name, patch, { signal });
}
