/**
 * charts/peerload: lints, renders what deploy/ renders where both set the same thing (so the Helm and kubectl
 * installs cannot drift), carries the CRDs of crds/, and the real apiserver accepts it (server-side apply).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { GVR, KubeClient } from '../../src/runtime/index.ts';
import { CHART, helm, helmTemplate } from '../support/helm.ts';
import { createNamespace, kubeConfig, REPO_ROOT } from '../support/kube.ts';
import { gvrOf, kustomize, serverSideApply, type Manifest } from '../support/runtime-deploy.ts';
import { METRICS_SCRAPE_ENDPOINT } from '../fixtures/metrics-scrape.ts';
import { DEFAULT_STORAGE_HOSTS } from '../../src/policy/storage-reach.ts';
import { DEFAULT_HUB_REDIRECT_HOSTS } from '../../src/huggingface/endpoint.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const kube = new KubeClient(kc);
afterAll(() => kube.close());

const NS = 'peerload-system';
const chart = helmTemplate('peerload', NS);
const base = kustomize(join(REPO_ROOT, 'deploy/base'));
const one = (ms: Manifest[], kind: string) => {
  const found = ms.filter((m) => m.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0] as any;
};

const apply = (m: Manifest, dryRun: boolean) =>
  serverSideApply(kube, m, { dryRun, fieldManager: 'peerload-chart-test' });

describe('charts/peerload', () => {
  it('passes helm lint, with the defaults and with every toggle', () => {
    expect(helm(['lint', '--strict', CHART])).toMatch(/1 chart\(s\) linted, 0 chart\(s\) failed/);
    expect(
      helm([
        'lint',
        '--strict',
        CHART,
        '--set',
        'watchNamespace=team-a,manager.url=http://m:8080,manager.tokenSecret=df-token',
        '--set',
        'metrics.serviceMonitor.enabled=true,leaderElection.enabled=false,replicaCount=1',
      ]),
    ).toMatch(/0 chart\(s\) failed/);
  });

  it('carries the CRDs of crds/ unchanged', () => {
    for (const f of [
      'clustermanagers.peerload.io.yaml',
      'modelpreheats.peerload.io.yaml',
      'servedmodels.peerload.io.yaml',
    ]) {
      expect(readFileSync(join(CHART, 'crds', f), 'utf8')).toBe(
        readFileSync(join(REPO_ROOT, 'crds', f), 'utf8'),
      );
    }
    const withCRDs = helmTemplate('peerload', NS, {}, ['--include-crds']);
    expect(
      withCRDs
        .filter((m) => m.kind === 'CustomResourceDefinition')
        .map((m) => m.metadata.name)
        .sort(),
    ).toEqual(['clustermanagers.peerload.io', 'modelpreheats.peerload.io', 'servedmodels.peerload.io']);
  });

  it('renders the Deployment of deploy/ where both set the same thing', () => {
    const h = one(chart, 'Deployment');
    const k = one(base, 'Deployment');
    expect(h.metadata.name).toBe(k.metadata.name);
    expect(h.metadata.namespace).toBe(k.metadata.namespace);
    expect(h.spec.replicas).toBe(k.spec.replicas);
    // The chart's selector adds the release label to deploy/'s.
    expect(h.spec.selector.matchLabels).toMatchObject(k.spec.selector.matchLabels);
    const hp = h.spec.template.spec;
    const kp = k.spec.template.spec;
    for (const f of ['serviceAccountName', 'terminationGracePeriodSeconds', 'securityContext', 'volumes'])
      expect(hp[f], f).toEqual(kp[f]);
    const term = (p: any) => p.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0];
    expect(term(hp).podAffinityTerm.labelSelector.matchLabels).toMatchObject(
      term(kp).podAffinityTerm.labelSelector.matchLabels,
    );
    const hc = hp.containers[0];
    const kc0 = kp.containers[0];
    for (const f of [
      'name',
      'image',
      'command',
      'env',
      'ports',
      'livenessProbe',
      'readinessProbe',
      'resources',
      'securityContext',
      'volumeMounts',
    ])
      expect(hc[f], f).toEqual(kc0[f]);
    // deploy/'s flags, and the Lease named after the release (peerload-operator for release "peerload").
    expect(hc.args).toEqual(expect.arrayContaining(kc0.args));
    expect(hc.args).toContain('--leader-election-id=peerload-operator');
  });

  it('renders the RBAC, Service, PodDisruptionBudget and NetworkPolicy of deploy/', () => {
    const byName = (ms: Manifest[], kind: string) =>
      new Map(ms.filter((m) => m.kind === kind).map((m) => [m.metadata.name, m as any]));
    for (const kind of ['ClusterRole', 'Role', 'ClusterRoleBinding', 'RoleBinding']) {
      const h = byName(chart, kind);
      const k = byName(base, kind);
      if (kind === 'Role' || kind === 'RoleBinding') {
        // The leader-election Role is named after the release in the chart.
        expect(
          [...h.values()].map((m) => m.rules ?? m.roleRef),
          kind,
        ).toEqual([...k.values()].map((m) => m.rules ?? m.roleRef));
        continue;
      }
      expect([...h.keys()].sort(), kind).toEqual([...k.keys()].sort());
      for (const [name, m] of k) {
        expect(h.get(name).rules, name).toEqual(m.rules);
        expect(h.get(name).roleRef, name).toEqual(m.roleRef);
        expect(h.get(name).subjects, name).toEqual(m.subjects);
      }
    }
    expect(one(chart, 'RoleBinding').subjects).toEqual(one(base, 'RoleBinding').subjects);
    const hn = one(chart, 'NetworkPolicy');
    const kn = one(base, 'NetworkPolicy');
    expect(hn.metadata.name).toBe(kn.metadata.name);
    expect(hn.spec.podSelector.matchLabels).toMatchObject(kn.spec.podSelector.matchLabels);
    for (const f of ['policyTypes', 'ingress', 'egress']) expect(hn.spec[f], f).toEqual(kn.spec[f]);
    expect(one(chart, 'ServiceAccount').metadata.name).toBe(one(base, 'ServiceAccount').metadata.name);
    expect(one(chart, 'Service').spec.ports).toEqual(one(base, 'Service').spec.ports);
    expect(one(chart, 'PodDisruptionBudget').spec.minAvailable).toBe(
      one(base, 'PodDisruptionBudget').spec.minAvailable,
    );
  });

  it('sets the manager URL, token Secret, namespace scope and leader election from values', () => {
    const ms = helmTemplate('models', 'ml', {
      'manager.url': 'http://dragonfly-manager.dragonfly-system:8080',
      'manager.tokenSecret': 'df-token',
      watchNamespace: 'team-a',
      'leaderElection.enabled': 'false',
      replicaCount: '1',
      'metrics.serviceMonitor.enabled': 'true',
    });
    const d = one(ms, 'Deployment');
    expect(d.metadata.name).toBe('models-operator');
    expect(d.spec.replicas).toBe(1);
    expect(d.spec.template.spec.containers[0].args).toEqual(
      expect.arrayContaining([
        '--no-leader-elect',
        '--manager-url=http://dragonfly-manager.dragonfly-system:8080',
        '--manager-token-secret=df-token',
        '--namespace=team-a',
      ]),
    );
    // Namespace scope: no cluster-wide rights but the reviews of /metrics' scrapers (cluster-scoped kinds) and the
    // reader role; the operator's rules in team-a; the token Secret by name.
    const cluster = new Map(
      ms.filter((m) => m.kind.startsWith('Cluster')).map((m) => [`${m.kind}/${m.metadata.name}`, m as any]),
    );
    expect([...cluster.keys()].sort()).toEqual([
      'ClusterRole/models-operator-metrics-auth',
      'ClusterRole/models-operator-metrics-reader',
      'ClusterRoleBinding/models-operator-metrics-auth',
    ]);
    expect(
      cluster.get('ClusterRole/models-operator-metrics-auth').rules.flatMap((r: any) => r.resources),
    ).toEqual(['tokenreviews', 'subjectaccessreviews']);
    expect(cluster.get('ClusterRole/models-operator-metrics-reader').rules).toEqual([
      { nonResourceURLs: ['/metrics'], verbs: ['get'] },
    ]);
    const roles = ms.filter((m) => m.kind === 'Role') as any[];
    expect(roles.map((r) => `${r.metadata.namespace}/${r.metadata.name}`).sort()).toEqual([
      'ml/models-operator-manager-token',
      'team-a/models-operator',
    ]);
    expect(roles.find((r) => r.metadata.namespace === 'ml').rules).toEqual([
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['df-token'], verbs: ['get'] },
    ]);
    expect(ms.filter((m) => m.kind === 'PodDisruptionBudget')).toEqual([]); // one replica: nothing to keep
    const sm = one(ms, 'ServiceMonitor');
    expect(sm.spec.endpoints[0]).toEqual(METRICS_SCRAPE_ENDPOINT);
    expect(sm.spec.selector.matchLabels).toEqual(one(ms, 'Service').spec.selector);
  });

  it('serves metrics with a certificate Secret, verified by the ServiceMonitor; or plain HTTP when told', () => {
    const withCert = helmTemplate('models', 'ml', {
      'metrics.certSecret': 'metrics-tls',
      'metrics.serviceMonitor.enabled': 'true',
    });
    const pod = one(withCert, 'Deployment').spec.template.spec;
    expect(pod.containers[0].args).toEqual(
      expect.arrayContaining(['--metrics-secure', '--metrics-cert-dir=/etc/peerload/metrics-cert']),
    );
    expect(pod.containers[0].volumeMounts).toContainEqual({
      name: 'metrics-cert',
      mountPath: '/etc/peerload/metrics-cert',
      readOnly: true,
    });
    expect(pod.volumes).toContainEqual({
      name: 'metrics-cert',
      secret: {
        secretName: 'metrics-tls',
        items: [
          { key: 'tls.crt', path: 'tls.crt' },
          { key: 'tls.key', path: 'tls.key' },
        ],
      },
    });
    expect(one(withCert, 'ServiceMonitor').spec.endpoints[0].tlsConfig).toEqual({
      serverName: 'models-operator-metrics.ml.svc',
      ca: { secret: { name: 'metrics-tls', key: 'ca.crt' } },
    });

    const plain = helmTemplate('models', 'ml', {
      'metrics.secure': 'false',
      'metrics.serviceMonitor.enabled': 'true',
    });
    const c = one(plain, 'Deployment').spec.template.spec.containers[0];
    expect(c.args).toContain('--no-metrics-secure');
    expect(c.args).not.toContain('--metrics-secure');
    expect(c.livenessProbe.httpGet.scheme).toBe('HTTP');
    expect(one(plain, 'ServiceMonitor').spec.endpoints[0].scheme).toBeUndefined();
    expect(plain.filter((m) => m.metadata.name.includes('metrics-')).map((m) => m.kind)).toEqual([]);
  });

  it('takes the NetworkPolicy peers from values, and never renders an empty `to` (everywhere)', () => {
    const ms = helmTemplate('models', 'ml', {
      'networkPolicy.apiServer.cidrs[0]': '172.18.0.2/32',
      'networkPolicy.apiServer.ports[0]': '6443',
      'networkPolicy.managers.to[0].ipBlock.cidr': '10.20.0.0/16',
      'networkPolicy.modelServers.to': 'null',
      'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name': 'monitoring',
    });
    const np = one(ms, 'NetworkPolicy').spec;
    expect(np.ingress).toEqual([
      {
        ports: [{ port: 'metrics', protocol: 'TCP' }],
        from: [{ namespaceSelector: { matchLabels: { name: 'monitoring' } } }],
      },
    ]);
    expect(np.egress.slice(1)).toEqual([
      { ports: [{ port: 6443, protocol: 'TCP' }], to: [{ ipBlock: { cidr: '172.18.0.2/32' } }] },
      { to: [{ ipBlock: { cidr: '10.20.0.0/16' } }], ports: [{ port: 8080, protocol: 'TCP' }] },
    ]);
    for (const r of np.egress) expect(r.to === undefined || r.to.length > 0).toBe(true);
    expect(
      helmTemplate('models', 'ml', { 'networkPolicy.enabled': 'false' }).map((m) => m.kind),
    ).not.toContain('NetworkPolicy');
  });

  it("narrows the apiserver rule to the `kubernetes` Service's addresses when it can read them (install, upgrade)", async () => {
    // A slice of the `kubernetes` Service as the apiserver's endpoint reconciler writes one (a test address).
    const slice = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: 'kubernetes-chart-test',
        namespace: 'default',
        labels: { 'kubernetes.io/service-name': 'kubernetes' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['198.18.0.9'] }],
      ports: [{ name: 'https', port: 6443, protocol: 'TCP' }],
    };
    const slices = kube.resource(GVR.endpointSlices);
    await slices.patch('default', slice.metadata.name, slice, {
      type: 'apply',
      fieldManager: 'peerload-chart-test',
      force: true,
    });
    try {
      // --dry-run=server: the chart's lookup reads the cluster, as helm install does.
      const np = one(
        helmTemplate('models', 'ml', {}, ['--dry-run=server', '--kubeconfig', inject('kubeconfigPath')]),
        'NetworkPolicy',
      ).spec;
      const apiServer = np.egress.find((r: { ports: { port: number }[] }) =>
        r.ports.some((p) => p.port === 6443),
      );
      expect(apiServer.to).toContainEqual({ ipBlock: { cidr: '198.18.0.9/32' } });
      // Offline (helm template), it cannot read them: any address on 443/6443, as deploy/base.
      const offline = one(helmTemplate('models', 'ml'), 'NetworkPolicy').spec;
      expect(
        offline.egress.find((r: { ports: { port: number }[] }) => r.ports.some((p) => p.port === 6443)).to,
      ).toBeUndefined();
    } finally {
      await slices.delete('default', slice.metadata.name).catch(() => undefined);
    }
  });

  it('sets the reach allow-lists from values, and reads ClusterManagers in namespace scope when asked', () => {
    const args = (set: Record<string, string>) =>
      one(helmTemplate('models', 'ml', set), 'Deployment').spec.template.spec.containers[0].args;
    // Default: both empty, as deploy/base says.
    expect(args({})).toEqual(
      expect.arrayContaining([
        '--allowed-manager-hosts=',
        '--allowed-endpoint-hosts=',
        `--allowed-storage-hosts=${DEFAULT_STORAGE_HOSTS}`,
        '--allowed-registry-hosts=',
        '--allowed-basic-auth-registry-hosts=',
        '--allowed-hub-hosts=huggingface.co',
        `--allowed-hub-redirect-hosts=${DEFAULT_HUB_REDIRECT_HOSTS}`,
      ]),
    );
    expect(
      args({
        allowedStorageHosts: '{minio.storage.svc:9000}',
        allowedRegistryHosts: '{ghcr.io}',
        allowedBasicAuthRegistryHosts: '{registry.corp.example:5000}',
        allowedHubHosts: '{hub.corp.example}',
        allowedHubRedirectHosts: '{cdn.hub.corp.example}',
      }),
    ).toEqual(
      expect.arrayContaining([
        '--allowed-storage-hosts=minio.storage.svc:9000',
        '--allowed-registry-hosts=ghcr.io',
        '--allowed-basic-auth-registry-hosts=registry.corp.example:5000',
        '--allowed-hub-hosts=hub.corp.example',
        '--allowed-hub-redirect-hosts=cdn.hub.corp.example',
      ]),
    );
    expect(
      args({
        allowedManagerHosts: '{manager.dragonfly-system.svc:8080,*.corp}',
        allowedEndpointHosts: '{10.0.0.0/8}',
      }),
    ).toEqual(
      expect.arrayContaining([
        '--allowed-manager-hosts=manager.dragonfly-system.svc:8080,*.corp',
        '--allowed-endpoint-hosts=10.0.0.0/8',
      ]),
    );
    const scoped = helmTemplate('models', 'ml', { watchNamespace: 'team-a', readClusterManagers: 'true' });
    const role = scoped.find((m) => m.kind === 'ClusterRole') as any;
    expect(role.metadata.name).toBe('models-operator-clustermanagers');
    expect(role.rules).toEqual([
      { apiGroups: ['peerload.io'], resources: ['clustermanagers'], verbs: ['get'] },
      { apiGroups: [''], resources: ['namespaces'], verbs: ['get'] },
    ]);
    expect(
      scoped.filter((m) => m.kind === 'ClusterRoleBinding').map((m) => (m as any).roleRef.name),
    ).toContain('models-operator-clustermanagers');
  });

  it('is accepted by the apiserver: the defaults (dry run) and a namespace-scoped release (applied)', async () => {
    // The namespace must exist even for a dry run; deploy-manifests creates the same one.
    await apply(one(kustomize(join(REPO_ROOT, 'deploy/base')), 'Namespace'), false);
    for (const m of chart) expect((await apply(m, true)).metadata.name).toBe(m.metadata.name);

    const release = await createNamespace(kc, 'chart');
    const watched = await createNamespace(kc, 'chart-team');
    const scoped = helmTemplate('scoped', release, {
      watchNamespace: watched,
      'manager.tokenSecret': 'df-token',
      'metrics.certSecret': 'metrics-tls',
      'networkPolicy.apiServer.cidrs[0]': '172.18.0.2/32',
      'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name': 'monitoring',
    });
    for (const m of scoped) await apply(m, false);
    const d = await kube.resource(gvrOf(one(scoped, 'Deployment'))).get(release, 'scoped-operator');
    expect((d as any).spec.template.spec.serviceAccountName).toBe('scoped-operator');
    const lease = await kube
      .resource(GVR.leases)
      .list(release)
      .then((l) => l.items.length);
    expect(lease).toBe(0); // nothing runs the pods here: no kubelet, no scheduler
  });

  it("installs with the README's `helm install`, and uninstalls", async () => {
    const DEPLOYMENTS = gvrOf({ apiVersion: 'apps/v1', kind: 'Deployment' } as Manifest);
    // The README's command, with the chart it publishes read from the repository (the release registry is not
    // reachable from the tests) and a release and namespace of this run's own.
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
    const command = /^helm install [\s\S]*?[^\\]$/m
      .exec(readme)![0]
      .replace(/\\\n\s*/g, ' ')
      .split(/\s+/);
    expect(command.slice(0, 3)).toEqual(['helm', 'install', 'peerload']);
    const managerURL = command.find((a) => a.startsWith('manager.url='))!.slice('manager.url='.length);
    expect(managerURL).toMatch(/^http:\/\//);
    const ns = `peerload-readme-${Date.now().toString(36)}`;
    const release = `readme-${Date.now().toString(36)}`;
    const args = command.slice(3).flatMap((a, i, all) => {
      if (a.startsWith('oci://')) return [CHART];
      if (a === '--version' || all[i - 1] === '--version') return [];
      if (all[i - 1] === '--namespace') return [ns];
      return [a];
    });
    expect(args).toEqual([
      CHART,
      '--namespace',
      ns,
      '--create-namespace',
      '--set',
      `manager.url=${managerURL}`,
    ]);
    const kubeconfig = ['--kubeconfig', inject('kubeconfigPath')];
    helm(['install', release, ...args, ...kubeconfig, '--wait=false']);
    try {
      expect(helm(['status', release, '--namespace', ns, ...kubeconfig])).toMatch(/STATUS: deployed/);
      const d = (await kube.resource(DEPLOYMENTS).get(ns, `${release}-operator`)) as any;
      const operator = d.spec.template.spec.containers.find((c: { name: string }) => c.name === 'operator');
      expect(operator.args).toContain(`--manager-url=${managerURL}`);
    } finally {
      helm(['uninstall', release, '--namespace', ns, ...kubeconfig]);
    }
    await expect(kube.resource(DEPLOYMENTS).get(ns, `${release}-operator`)).rejects.toThrow();
  });
});
