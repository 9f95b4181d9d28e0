/**
 * A set-up file of the projects that share one control plane (integration, e2e): after each test file, the
 * peerload objects in the namespaces it created are removed, their finalizers first. The control plane has no
 * namespace controller (no kube-controller-manager), so a namespace is never emptied by itself, and every operator a
 * later file starts watches all namespaces: a ModelPreheat left behind with no manager of its own would be
 * reconciled there against that file's default manager (its jobs counted as that file's, its token sent to a
 * listener that must receive nothing).
 */
import * as k8s from '@kubernetes/client-node';
import { afterAll, inject } from 'vitest';
import { createdNamespaces, kubeConfig } from './kube.ts';

const PLURALS = ['servedmodels', 'modelpreheats'] as const;

afterAll(async () => {
  const namespaces = createdNamespaces.splice(0);
  if (namespaces.length === 0) return;
  const kc = kubeConfig(inject('kubeconfigPath'));
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const at = { group: 'peerload.io', version: 'v1alpha1' };
  for (const namespace of namespaces)
    for (const plural of PLURALS) {
      const list = (await custom
        .listNamespacedCustomObject({ ...at, namespace, plural })
        .catch(() => ({ items: [] }))) as { items: k8s.KubernetesObject[] };
      for (const o of list.items) {
        const { name, finalizers } = o.metadata ?? {};
        if (finalizers?.length)
          await objects
            .patch(
              { apiVersion: o.apiVersion, kind: o.kind, metadata: { name, namespace, finalizers: [] } },
              undefined,
              undefined,
              'peerload-tests',
              undefined,
              k8s.PatchStrategy.MergePatch,
            )
            .catch(() => undefined);
        await custom
          .deleteNamespacedCustomObject({ ...at, namespace, plural, name: name! })
          .catch(() => undefined);
      }
    }
}, 60_000);
