/**
 * deploy/: the kustomize output is what the issue asks for, and the real apiserver accepts every object
 * (server-side apply, dry run).
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, inject, it } from 'vitest';
import { KubeClient } from '../../src/runtime/index.ts';
import { kubeConfig } from '../support/kube.ts';
import { gvrOf, renderDefault, type Manifest } from '../support/runtime-deploy.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const manifests = renderDefault();
const find = (kind: string) => manifests.filter((m) => m.kind === kind);

const deployment = find('Deployment')[0] as any;

describe('deploy/default', () => {
  it('holds the CRDs, namespace, ServiceAccount, RBAC, Deployment, Service', () => {
    expect(
      find('CustomResourceDefinition')
        .map((m) => m.metadata.name)
        .sort(),
    ).toEqual(['clustermanagers.peerload.io', 'modelpreheats.peerload.io', 'servedmodels.peerload.io']);
    expect(find('Namespace').map((m) => m.metadata.name)).toEqual(['peerload-system']);
    for (const kind of [
      'ServiceAccount',
      'ClusterRole',
      'ClusterRoleBinding',
      'Role',
      'RoleBinding',
      'Service',
    ]) {
      expect(find(kind), kind).toHaveLength(1);
    }
    for (const m of manifests.filter(
      (m) => !['Namespace', 'CustomResourceDefinition', 'ClusterRole', 'ClusterRoleBinding'].includes(m.kind),
    )) {
      expect(m.metadata.namespace, `${m.kind}/${m.metadata.name}`).toBe('peerload-system');
    }
  });

  it('has RBAC without wildcards', () => {
    for (const role of [...find('ClusterRole'), ...find('Role')] as unknown as k8s.V1ClusterRole[]) {
      for (const rule of role.rules ?? []) {
        for (const v of [...(rule.verbs ?? []), ...(rule.resources ?? []), ...(rule.apiGroups ?? [])]) {
          expect(v).not.toContain('*');
        }
      }
    }
  });

  it('runs 2 replicas, non-root with a read-only root filesystem, probes, requests and limits', () => {
    const spec = deployment.spec;
    expect(spec.replicas).toBe(2);
    const pod = spec.template.spec;
    expect(pod.serviceAccountName).toBe('peerload-operator');
    expect(pod.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    const c = pod.containers[0];
    expect(c.image).toBe('ghcr.io/peerload/peerload:0.1.0');
    expect(c.command).toEqual(['peerload', 'operator']);
    expect(c.args).toContain('--leader-elect');
    expect(c.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
    });
    expect(c.livenessProbe.httpGet.path).toBe('/healthz');
    expect(c.readinessProbe.httpGet.path).toBe('/readyz');
    expect(c.resources.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    expect(c.resources.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    // The operator's shutdown deadline fits in the grace period.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(25);
    const svc = find('Service')[0] as unknown as k8s.V1Service;
    expect(svc.spec?.ports?.[0]).toMatchObject({ name: 'metrics', port: 8080 });
    expect(svc.spec?.selector).toEqual(spec.selector.matchLabels);
  });

  it('is accepted by the apiserver (server-side apply, dry run)', async () => {
    // The runtime's own client sends the YAML as is (client-node's typed serialisation drops x-kubernetes-*).
    const kube = new KubeClient(kc);
    try {
      const apply = (m: Manifest, dryRun: boolean) =>
        kube.resource(gvrOf(m)).patch(m.metadata.namespace, m.metadata.name, m, {
          type: 'apply',
          fieldManager: 'peerload-tests',
          force: true,
          dryRun,
        });
      // Objects in a namespace need the namespace to exist, even in a dry run: create it for real.
      await apply(find('Namespace')[0]!, false);
      const accepted: string[] = [];
      for (const m of manifests) {
        const r = await apply(m, true);
        expect(r.metadata.name).toBe(m.metadata.name);
        accepted.push(`${m.kind}/${m.metadata.name}`);
      }
      expect(accepted).toHaveLength(manifests.length);
      // A dry run persists nothing.
      await expect(
        kube.resource(gvrOf(deployment)).get('peerload-system', 'peerload-operator'),
      ).rejects.toThrow(/404/);
    } finally {
      await kube.close();
    }
  });
});
