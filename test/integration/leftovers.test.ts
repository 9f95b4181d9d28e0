/**
 * No test file leaves peerload objects behind for a later file's operator to reconcile (test/support/
 * namespace-cleanup.ts). Run after the other integration files (vitest puts short files late; the integration
 * project runs before the e2e one), it sees what they left; it failed after deploy-rbac.test.ts before the clean-up
 * existed.
 */
import * as k8s from '@kubernetes/client-node';
import { expect, inject, it } from 'vitest';
import { kubeConfig } from '../support/kube.ts';
it('no peerload object is left by earlier files', async () => {
  const kc = kubeConfig(inject('kubeconfigPath'));
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const left: string[] = [];
  for (const plural of ['servedmodels', 'modelpreheats']) {
    const l = (await custom.listClusterCustomObject({
      group: 'peerload.io',
      version: 'v1alpha1',
      plural,
    })) as { items: k8s.KubernetesObject[] };
    left.push(...l.items.map((o) => `${plural} ${o.metadata!.namespace}/${o.metadata!.name}`));
  }
  expect(left).toEqual([]);
});
