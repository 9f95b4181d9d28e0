/**
 * deploy/: the kustomize output is what the issue asks for, and the real apiserver accepts every object
 * (server-side apply, dry run).
 */
import * as k8s from '@kubernetes/client-node';
import { describe, expect, inject, it } from 'vitest';
import { KubeClient } from '../../src/runtime/index.ts';
import { kubeConfig } from '../support/kube.ts';
import { gvrOf, renderDefault, serverSideApply, type Manifest } from '../support/runtime-deploy.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const manifests = renderDefault();
const find = (kind: string) => manifests.filter((m) => m.kind === kind);

const deployment = find('Deployment')[0] as any;

describe('deploy/default', () => {
  it('holds the CRDs, namespace, ServiceAccount, RBAC, Deployment, Service, NetworkPolicy', () => {
    expect(
      find('CustomResourceDefinition')
        .map((m) => m.metadata.name)
        .sort(),
    ).toEqual(['clustermanagers.peerload.io', 'modelpreheats.peerload.io', 'servedmodels.peerload.io']);
    expect(find('Namespace').map((m) => m.metadata.name)).toEqual(['peerload-system']);
    for (const kind of ['ServiceAccount', 'Role', 'RoleBinding', 'Service', 'NetworkPolicy']) {
      expect(find(kind), kind).toHaveLength(1);
    }
    expect(find('ClusterRole').map((m) => m.metadata.name)).toEqual([
      'peerload-operator',
      'peerload-operator-metrics-auth',
      'peerload-operator-metrics-reader',
    ]);
    expect(find('ClusterRoleBinding').map((m) => m.metadata.name)).toEqual([
      'peerload-operator',
      'peerload-operator-metrics-auth',
    ]);
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
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics', scheme: 'HTTPS' });
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'metrics', scheme: 'HTTPS' });
    expect(c.args).toEqual(expect.arrayContaining(['--metrics-address=:8443', '--metrics-secure']));
    expect(c.resources.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    expect(c.resources.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
    // The operator's shutdown deadline fits in the grace period.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(25);
    const svc = find('Service')[0] as unknown as k8s.V1Service;
    expect(svc.spec?.ports?.[0]).toMatchObject({ name: 'metrics', port: 8443 });
    expect(svc.spec?.selector).toEqual(spec.selector.matchLabels);
  });

  it('lets the operator create token and access reviews for /metrics, and names who may read it', () => {
    const rules = (name: string) => find('ClusterRole').find((m) => m.metadata.name === name)!.rules;
    expect(rules('peerload-operator-metrics-auth')).toEqual([
      { apiGroups: ['authentication.k8s.io'], resources: ['tokenreviews'], verbs: ['create'] },
      { apiGroups: ['authorization.k8s.io'], resources: ['subjectaccessreviews'], verbs: ['create'] },
    ]);
    expect(rules('peerload-operator-metrics-reader')).toEqual([
      { nonResourceURLs: ['/metrics'], verbs: ['get'] },
    ]);
    const binding = find('ClusterRoleBinding').find(
      (m) => m.metadata.name === 'peerload-operator-metrics-auth',
    )!;
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: 'peerload-operator', namespace: 'peerload-system' },
    ]);
  });

  it('confines the operator with a NetworkPolicy: in, the metrics port; out, DNS, apiserver, managers, model servers', () => {
    const np = find('NetworkPolicy')[0] as any;
    expect(np.spec.podSelector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(np.spec.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(np.spec.ingress).toEqual([{ ports: [{ port: 'metrics', protocol: 'TCP' }] }]);
    const egress = np.spec.egress as { to?: any[]; ports: { port: number; protocol: string }[] }[];
    const ports = (r: (typeof egress)[number]) => r.ports.map((p) => `${p.protocol}/${p.port}`);
    expect(egress.map(ports)).toEqual([
      ['UDP/53', 'TCP/53'],
      ['TCP/443', 'TCP/6443'],
      ['TCP/8080'],
      // The examples' model servers: TorchServe's management API, Triton's and vLLM's HTTP API, the agent.
      ['TCP/8081', 'TCP/8000', 'TCP/8095'],
    ]);
    // Only the apiserver rule has no peers (its address is no pod's); every other rule names in-cluster pods.
    expect(egress.filter((r) => !r.to).map(ports)).toEqual([['TCP/443', 'TCP/6443']]);
    for (const r of egress.filter((r) => r.to))
      for (const peer of r.to!) expect(peer.ipBlock, JSON.stringify(peer)).toBeUndefined();
    expect(egress[0]!.to).toEqual([
      {
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
        podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
      },
    ]);
  });

  it('is accepted by the apiserver (server-side apply, dry run)', async () => {
    // The runtime's own client sends the YAML as is (client-node's typed serialisation drops x-kubernetes-*).
    const kube = new KubeClient(kc);
    try {
      const apply = (m: Manifest, dryRun: boolean) => serverSideApply(kube, m, { dryRun });
      // Objects in a namespace need the namespace to exist, even in a dry run: create it for real.
      await apply(find('Namespace')[0]!, false);
      const accepted: string[] = [];
      for (const m of manifests) {
        const r = await apply(m, true);
        expect(r.metadata.name).toBe(m.metadata.name);
        accepted.push(`${m.kind}/${m.metadata.name}`);
      }
      expect(accepted).toHaveLength(manifests.length);
      // Pod Security: peerload-system enforces `restricted`, which the apiserver checks on Pods (a Deployment
      // only warns). The Deployment's pod, created (dry run) there, is admitted without a warning.
      expect(find('Namespace')[0]!.metadata.labels).toMatchObject({
        'pod-security.kubernetes.io/enforce': 'restricted',
      });
      await apply(find('ServiceAccount')[0]!, false); // a Pod's ServiceAccount must exist, even in a dry run
      const warnings: string[] = [];
      kube.onRequest((r) => warnings.push(...(r.warnings ?? [])));
      const pod = {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { name: 'peerload-operator-pss', namespace: 'peerload-system' },
        spec: deployment.spec.template.spec,
      };
      expect((await apply(pod as Manifest, true)).metadata.name).toBe('peerload-operator-pss');
      expect(warnings).toEqual([]);
      // The level is enforced here: the same pod without its security contexts is refused.
      const loose = structuredClone(pod);
      delete loose.spec.securityContext;
      for (const c of loose.spec.containers) delete c.securityContext;
      await expect(
        apply({ ...loose, metadata: { ...loose.metadata, name: 'loose' } } as Manifest, true),
      ).rejects.toThrow(/violates PodSecurity "restricted:latest"/);
      // A dry run persists nothing.
      await expect(
        kube.resource(gvrOf(deployment)).get('peerload-system', 'peerload-operator'),
      ).rejects.toThrow(/404/);
    } finally {
      await kube.close();
    }
  });
});
