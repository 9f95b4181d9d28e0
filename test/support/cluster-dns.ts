/**
 * Cluster DNS for the real cluster (cluster.ts): CoreDNS as a Deployment with the Service `kube-dns` at the kubelets'
 * clusterDNS address, as a cluster's DNS add-on installs it, so pods resolve `svc.ns.svc.cluster.local` and short
 * names. It serves only the cluster's zones: nothing outside the machine is reachable from a pod anyway. It listens
 * on 1053 as a non-root user (port 53 needs a capability a non-root process gets only as an ambient one, which
 * containerd 1.6 does not set); the Service maps 53 to it.
 */
const COREFILE = `.:1053 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loadbalance
}
`;

export function coreDNSManifests(image: string, clusterIP: string): object {
  const labels = { 'k8s-app': 'kube-dns' };
  const meta = (name: string) => ({ name, namespace: 'kube-system', labels });
  const items = [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('coredns') },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        {
          apiGroups: [''],
          resources: ['endpoints', 'services', 'pods', 'namespaces'],
          verbs: ['list', 'watch'],
        },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: 'kube-system' }],
    },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('coredns'), data: { Corefile: COREFILE } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: meta('coredns'),
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: 'coredns',
            priorityClassName: 'system-cluster-critical',
            dnsPolicy: 'Default',
            securityContext: { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532 },
            containers: [
              {
                name: 'coredns',
                image,
                imagePullPolicy: 'Never',
                args: ['-conf', '/etc/coredns/Corefile'],
                ports: [
                  { name: 'dns', containerPort: 1053, protocol: 'UDP' },
                  { name: 'dns-tcp', containerPort: 1053, protocol: 'TCP' },
                ],
                volumeMounts: [{ name: 'config', mountPath: '/etc/coredns', readOnly: true }],
                livenessProbe: { httpGet: { path: '/health', port: 8080 }, periodSeconds: 10 },
                readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
                resources: { requests: { cpu: '50m', memory: '40Mi' }, limits: { memory: '170Mi' } },
                securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true },
              },
            ],
            volumes: [{ name: 'config', configMap: { name: 'coredns' } }],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta('kube-dns'),
      spec: {
        selector: labels,
        clusterIP,
        ports: [
          { name: 'dns', port: 53, targetPort: 1053, protocol: 'UDP' },
          { name: 'dns-tcp', port: 53, targetPort: 1053, protocol: 'TCP' },
        ],
      },
    },
  ];
  return { apiVersion: 'v1', kind: 'List', items };
}
