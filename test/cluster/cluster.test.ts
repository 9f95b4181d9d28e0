/**
 * The real two-node cluster (test/support/cluster.ts) does what the e2e on it relies on: both nodes Ready, a
 * Deployment spread over both nodes, pod-to-pod traffic across nodes, a Service reached by its DNS names from a pod
 * (CoreDNS and kube-proxy), the downward API's status.hostIP, a hostPath volume. That its stop leaves nothing behind
 * is the global teardown's check (test/support/cluster-setup.ts); here, that the check finds what a running cluster
 * added.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { clusterKubectl, hostStateBefore } from '../support/cluster.ts';
import { hostState, leftovers, readSysctls } from '../support/cluster-host.ts';
import { waitFor } from '../support/process.ts';

const cluster = inject('cluster');
const kubectl = clusterKubectl(cluster);
const ns = `cluster-test-${randomBytes(3).toString('hex')}`;
const hostDir = join(cluster.dir, 'hostpath', ns);

interface Pod {
  metadata: { name: string };
  spec: { nodeName: string };
  status: { podIP: string; hostIP: string };
}

// Each pod answers a connection on 8080 with its name and the node IP the downward API gave it, and writes the same
// line into the hostPath volume (busybox's nc: Debian's busybox wget crashes).
const serverScript = [
  'printf "#!/bin/sh\\necho $(hostname) $NODE_IP\\n" > /tmp/answer',
  'chmod +x /tmp/answer',
  'echo "$(hostname) $NODE_IP" > /host/$(hostname)',
  'exec nc -ll -p 8080 -e /tmp/answer',
].join(' && ');

function manifests(): object {
  const labels = { app: 'web' };
  return {
    apiVersion: 'v1',
    kind: 'List',
    items: [
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: 'web', namespace: ns },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              topologySpreadConstraints: [
                {
                  maxSkew: 1,
                  topologyKey: 'kubernetes.io/hostname',
                  whenUnsatisfiable: 'DoNotSchedule',
                  labelSelector: { matchLabels: labels },
                },
              ],
              terminationGracePeriodSeconds: 1,
              containers: [
                {
                  name: 'web',
                  image: cluster.images.busybox,
                  imagePullPolicy: 'Never',
                  command: ['sh', '-c', serverScript],
                  env: [{ name: 'NODE_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } }],
                  ports: [{ containerPort: 8080 }],
                  readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
                  volumeMounts: [{ name: 'host', mountPath: '/host' }],
                },
              ],
              volumes: [{ name: 'host', hostPath: { path: hostDir, type: 'DirectoryOrCreate' } }],
            },
          },
        },
      },
      {
        apiVersion: 'v1',
        kind: 'Service',
        metadata: { name: 'web', namespace: ns },
        spec: { selector: labels, ports: [{ port: 80, targetPort: 8080 }] },
      },
    ],
  };
}

async function webPods(): Promise<Pod[]> {
  const list = JSON.parse(await kubectl(['-n', ns, 'get', 'pods', '-l', 'app=web', '-o', 'json'])) as {
    items: Pod[];
  };
  return list.items;
}

/** `nc` from inside `pod` to host:port; what the server answered. */
async function ncFrom(pod: string, host: string, port: number): Promise<string> {
  return (await kubectl(['-n', ns, 'exec', pod, '--', 'nc', '-w', '3', host, String(port)])).trim();
}

/** A TCP connection from this (the machine's) process; what the server answered. */
function ncHere(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = '';
    const s = connect({ host, port }, () => s.end());
    s.setEncoding('utf8').on('data', (c: string) => (data += c));
    s.on('end', () => resolve(data.trim()));
    s.on('error', reject);
    s.setTimeout(5000, () => s.destroy(new Error('timeout')));
  });
}

describe('the real two-node cluster', () => {
  let pods: Pod[] = [];

  beforeAll(async () => {
    await kubectl(['create', 'namespace', ns]);
    await kubectl(['apply', '-f', '-'], { input: JSON.stringify(manifests()) });
    const rollout = ['-n', ns, 'rollout', 'status', 'deployment/web', '--timeout=120s'];
    await kubectl(rollout, { timeoutMs: 130_000 }).catch(async (err: unknown) => {
      // What the pods and the events say, for the failure's report (each process's log is in cluster.logDir).
      console.error(await kubectl(['-n', ns, 'get', 'pods,events', '-o', 'wide']).catch(String));
      throw err;
    });
    pods = await webPods();
  });

  afterAll(async () => {
    await kubectl(['delete', 'namespace', ns, '--wait=true', '--timeout=60s'], { timeoutMs: 70_000 });
  });

  it('has both nodes Ready at v1.33.13, each with its bridge address as InternalIP', async () => {
    const nodes = JSON.parse(await kubectl(['get', 'nodes', '-o', 'json'])) as {
      items: {
        metadata: { name: string };
        status: {
          conditions: { type: string; status: string }[];
          addresses: { type: string; address: string }[];
          nodeInfo: { kubeletVersion: string; containerRuntimeVersion: string };
        };
      }[];
    };
    expect(nodes.items.map((n) => n.metadata.name).sort()).toEqual(cluster.nodes.map((n) => n.name).sort());
    for (const n of nodes.items) {
      const want = cluster.nodes.find((c) => c.name === n.metadata.name)!;
      expect(n.status.conditions.find((c) => c.type === 'Ready')?.status).toBe('True');
      expect(n.status.addresses.find((a) => a.type === 'InternalIP')?.address).toBe(want.ip);
      expect(n.status.nodeInfo.kubeletVersion).toBe('v1.33.13');
      expect(n.status.nodeInfo.containerRuntimeVersion).toMatch(/^containerd:\/\//);
    }
  });

  it("serves kubectl logs through a kubelet (the apiserver's kubelet client certificate, the kubelet's webhook authz)", async () => {
    const logs = await kubectl(['-n', 'kube-system', 'logs', 'deployment/coredns']);
    expect(logs).toMatch(/CoreDNS-1\.\d+\.\d+/);
  });

  it('spreads a 2-replica Deployment over both nodes, each pod in its node pod range', () => {
    expect(pods).toHaveLength(2);
    expect(new Set(pods.map((p) => p.spec.nodeName)).size).toBe(2);
    for (const p of pods) {
      const node = cluster.nodes.find((n) => n.name === p.spec.nodeName)!;
      expect(p.status.podIP.startsWith(node.podCIDR.replace(/0\/24$/, ''))).toBe(true);
      expect(p.status.hostIP).toBe(node.ip);
    }
  });

  it('gives each pod its node IP through the downward API (status.hostIP) and writes its hostPath volume', () => {
    for (const p of pods) {
      const node = cluster.nodes.find((n) => n.name === p.spec.nodeName)!;
      expect(readFileSync(join(hostDir, p.metadata.name), 'utf8').trim()).toBe(
        `${p.metadata.name} ${node.ip}`,
      );
    }
  });

  it('connects pod to pod across the nodes, and the machine to each pod', async () => {
    const [a, b] = pods as [Pod, Pod];
    expect(await ncFrom(a.metadata.name, b.status.podIP, 8080)).toBe(`${b.metadata.name} ${b.status.hostIP}`);
    expect(await ncFrom(b.metadata.name, a.status.podIP, 8080)).toBe(`${a.metadata.name} ${a.status.hostIP}`);
    for (const p of pods)
      expect(await ncHere(p.status.podIP, 8080)).toBe(`${p.metadata.name} ${p.status.hostIP}`);
  });

  it('reaches the Service by its DNS names from a pod, through kube-proxy to both pods', async () => {
    const client = pods[0]!.metadata.name;
    const answers = new Set<string>();
    for (const name of ['web', `web.${ns}`, `web.${ns}.svc`, `web.${ns}.svc.cluster.local`]) {
      answers.add(await ncFrom(client, name, 80));
    }
    // kube-proxy picks a backend at random: keep asking until both have answered (or fail after 30 tries).
    await waitFor(
      'both pods answering through the Service',
      async () => {
        answers.add(await ncFrom(client, 'web', 80));
        return answers.size === 2;
      },
      { timeoutMs: 60_000, intervalMs: 0 },
    );
    expect([...answers].sort()).toEqual(pods.map((p) => `${p.metadata.name} ${p.status.hostIP}`).sort());
    const svc = JSON.parse(await kubectl(['-n', ns, 'get', 'service', 'web', '-o', 'json'])) as {
      spec: { clusterIP: string };
    };
    const lookup = await kubectl(['-n', ns, 'exec', client, '--', 'nslookup', `web.${ns}.svc.cluster.local`]);
    expect(lookup).toContain(`Server:\t\t${cluster.clusterDNS}`);
    expect(lookup).toContain(`Address: ${svc.spec.clusterIP}`);
  });

  it('is seen by the leftover check while it runs (what the teardown checks after its stop)', async () => {
    const left = leftovers(hostStateBefore(cluster.dir), await hostState(), cluster.dir);
    for (const n of cluster.nodes) {
      expect(left).toContain(`link: ${n.bridge}`);
      expect(left.some((l) => l.startsWith(`cgroup: /sys/fs/cgroup/memory${n.cgroupRoot}`))).toBe(true);
      expect(left.some((l) => l.startsWith('process ') && l.includes(`--hostname-override=${n.name}`))).toBe(
        true,
      );
      expect(
        left.some((l) => l.startsWith('process ') && l.includes(` in ${n.cgroupRoot}: /bin/pause`)),
      ).toBe(true);
    }
    expect(left.some((l) => l.startsWith('rule: ') && l.includes('lookup 4244'))).toBe(true);
    expect(left.some((l) => /^iptables chain: iptables nat KUBE-SERVICES$/.test(l))).toBe(true);
    expect(left.some((l) => l.startsWith('mount: ') && l.includes('/kubelet/pods/'))).toBe(true);
    // The kubelets set kernel defaults (kernel.panic 10, ...): each that differs from before is named.
    const before = hostStateBefore(cluster.dir).sysctls;
    const now = readSysctls();
    for (const k of Object.keys(before).filter((k) => before[k] !== now[k])) {
      expect(left).toContain(`sysctl ${k}: ${before[k]} before, ${now[k]} now`);
    }
  });
});
