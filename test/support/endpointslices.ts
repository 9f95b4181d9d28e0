/**
 * EndpointSlices as the EndpointSlice controller would write them, for tests that run no controller-manager:
 * one slice per replica, because every emulated replica listens on its own loopback port.
 */
import * as k8s from '@kubernetes/client-node';
import { randomUUID } from 'node:crypto';
import { Agent, buildConnector } from 'undici';

export interface FakePod {
  name: string;
  uid: string;
  /** Where the replica really listens (127.0.0.1:port). */
  url: string;
  /** The address in the EndpointSlice (see loopbackDispatcher). */
  address: string;
  ready?: boolean;
  /** The pod's node (EndpointSlice nodeName). */
  node?: string;
}

export class ServiceEndpoints {
  private readonly api: k8s.DiscoveryV1Api;
  readonly namespace: string;
  readonly service: string;
  readonly pods = new Map<string, FakePod>();
  private static next = 0;

  constructor(kc: k8s.KubeConfig, namespace: string, service: string) {
    this.api = kc.makeApiClient(k8s.DiscoveryV1Api);
    this.namespace = namespace;
    this.service = service;
  }

  /** Service `service` with one ready pod per URL, pod i named `${podPrefix}-${i}` (the Service's name by default). */
  static async of(
    kc: k8s.KubeConfig,
    namespace: string,
    service: string,
    urls: string[],
    podPrefix = service,
  ): Promise<ServiceEndpoints> {
    const svc = new ServiceEndpoints(kc, namespace, service);
    for (const [i, url] of urls.entries()) await svc.add(`${podPrefix}-${i}`, url);
    return svc;
  }

  private sliceName(pod: string): string {
    return `${this.service}-${pod}`.slice(0, 63);
  }

  private body(pod: FakePod): k8s.V1EndpointSlice {
    const url = new URL(pod.url);
    return {
      metadata: { name: this.sliceName(pod.name), labels: { 'kubernetes.io/service-name': this.service } },
      addressType: 'IPv4',
      ports: [{ name: 'management', port: Number(url.port), protocol: 'TCP' }],
      endpoints: [
        {
          addresses: [pod.address],
          conditions: { ready: pod.ready ?? true },
          targetRef: { kind: 'Pod', name: pod.name, uid: pod.uid, namespace: this.namespace },
          ...(pod.node ? { nodeName: pod.node } : {}),
        },
      ],
    };
  }

  /** Adds (or replaces) a pod serving at `url`. */
  async add(name: string, url: string, ready = true, node?: string): Promise<FakePod> {
    const existing = this.pods.get(name);
    const address = existing?.address ?? sliceAddress(ServiceEndpoints.next++);
    const onNode = node ?? existing?.node;
    const pod = { name, uid: randomUUID(), url, address, ready, ...(onNode ? { node: onNode } : {}) };
    this.pods.set(name, pod);
    if (existing) {
      await this.api.replaceNamespacedEndpointSlice({
        namespace: this.namespace,
        name: this.sliceName(name),
        body: await this.withVersion(pod),
      });
    } else {
      await this.api.createNamespacedEndpointSlice({ namespace: this.namespace, body: this.body(pod) });
    }
    return pod;
  }

  /** The pod was recreated: same address, new UID (what a restarted StatefulSet pod looks like). */
  async recreate(name: string): Promise<FakePod> {
    const old = this.pods.get(name)!;
    return this.add(name, old.url, old.ready ?? true);
  }

  /** The pod's readiness changed (its container restarted): same pod, same UID. */
  async setReady(name: string, ready: boolean): Promise<FakePod> {
    const pod = { ...this.pods.get(name)!, ready };
    this.pods.set(name, pod);
    await this.api.replaceNamespacedEndpointSlice({
      namespace: this.namespace,
      name: this.sliceName(name),
      body: await this.withVersion(pod),
    });
    return pod;
  }

  /** A Node as the kubelet registers it: its InternalIP is where the node's peer daemon is reached. */
  static async createNode(kc: k8s.KubeConfig, name: string, internalIP: string): Promise<void> {
    // Nodes take their status on create (the kubelet's first registration does the same).
    await kc.makeApiClient(k8s.CoreV1Api).createNode({
      body: {
        metadata: { name },
        status: {
          addresses: [
            { type: 'InternalIP', address: internalIP },
            { type: 'Hostname', address: name },
          ],
        },
      },
    });
  }

  /** Where the pod behind a slice address really listens (its URL's host), for {@link loopbackDispatcher}. */
  hostOf(address: string): string | undefined {
    for (const pod of this.pods.values()) if (pod.address === address) return new URL(pod.url).hostname;
    return undefined;
  }

  async remove(name: string): Promise<void> {
    this.pods.delete(name);
    await this.api.deleteNamespacedEndpointSlice({ namespace: this.namespace, name: this.sliceName(name) });
  }

  private async withVersion(pod: FakePod): Promise<k8s.V1EndpointSlice> {
    const current = await this.api.readNamespacedEndpointSlice({
      namespace: this.namespace,
      name: this.sliceName(pod.name),
    });
    const body = this.body(pod);
    body.metadata!.resourceVersion = current.metadata?.resourceVersion;
    return body;
  }
}

/**
 * EndpointSlices may not hold loopback addresses, and tests may only talk to loopback. So slices carry addresses
 * of the benchmarking range 198.18.0.0/15 (RFC 2544; never routed) and the operator under test gets this
 * dispatcher, which connects to 127.0.0.1 on the same port instead, or to the loopback address `hosts` names for
 * a slice address (replicas on addresses of their own, e.g. on their node peer's 127.0.0.x, each with an agent
 * beside it at one port for all): a map, or a function such as {@link ServiceEndpoints.hostOf}. No packet is ever
 * sent to 198.18.x.
 */
export function loopbackDispatcher(
  hosts: ReadonlyMap<string, string> | ((address: string) => string | undefined) = new Map(),
): Agent {
  const hostOf = typeof hosts === 'function' ? hosts : (a: string) => hosts.get(a);
  const connect = buildConnector({});
  return new Agent({
    connect: (options, callback) => {
      const hostname =
        hostOf(options.hostname) ?? (/^198\.1[89]\./.test(options.hostname) ? '127.0.0.1' : options.hostname);
      // Tests talk to this machine only: refuse anything that is not loopback rather than send a packet.
      if (!/^127\./.test(hostname) && hostname !== 'localhost' && hostname !== '::1') {
        callback(new Error(`loopbackDispatcher refuses to connect to ${options.hostname}`), null);
        return;
      }
      connect({ ...options, hostname }, callback);
    },
  });
}

/** The slice address standing for the replica at `url` (see loopbackDispatcher). */
export function sliceAddress(index: number): string {
  return `198.18.${Math.floor(index / 250)}.${(index % 250) + 1}`;
}
