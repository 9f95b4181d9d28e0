/**
 * The InternalIP of the nodes that run model-server pods: where each node's peer daemon is reached (it runs with
 * hostNetwork, so the scheduler knows it by the node's address) and so what a node-targeted preheat names.
 *
 * Read with a GET per node and kept for a while, not from a Node informer: Node objects are large (image lists,
 * conditions) and a cluster's whole list would sit in memory for the few nodes that host model servers. A node's
 * InternalIP does not change while it exists; a node that is gone (404) is remembered as unknown for a shorter time.
 */
import { ApiError } from '../../runtime/kube.ts';
import type { KubeClient, KubeObject } from '../../runtime/index.ts';
import { GVR } from '../../api/index.ts';

type NodeObject = KubeObject & { status?: { addresses?: { type?: string; address?: string }[] } };

export interface NodeAddressesOptions {
  /** How long a node's address is reused. Default 10 minutes. */
  ttlMs?: number;
  now?: () => number;
}

export class NodeAddresses {
  private readonly kube: KubeClient;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private readonly cache = new Map<string, { at: number; ip: Promise<string | undefined> }>();

  constructor(kube: KubeClient, opts: NodeAddressesOptions = {}) {
    this.kube = kube;
    this.ttlMs = opts.ttlMs ?? 600_000;
    this.now = opts.now ?? Date.now;
  }

  /** The node's InternalIP (else its first address), or undefined when the node or its addresses are unknown. */
  internalIP(node: string): Promise<string | undefined> {
    const now = this.now();
    for (const [k, e] of this.cache) if (now - e.at >= this.ttlMs) this.cache.delete(k);
    let entry = this.cache.get(node);
    if (!entry) {
      // Single-flight: every replica of a node asks at once when a rollout starts.
      const ip = this.read(node);
      entry = { at: now, ip };
      this.cache.set(node, entry);
      ip.then(
        (v) => {
          // Unknown for a minute only: a node being registered gets its addresses soon.
          if (v === undefined) this.cache.set(node, { at: now - this.ttlMs + 60_000, ip });
        },
        () => {
          if (this.cache.get(node)?.ip === ip) this.cache.delete(node);
        },
      );
    }
    return entry.ip;
  }

  /** IPs of the given nodes, by node name; nodes whose address cannot be read are left out. */
  async internalIPs(nodes: Iterable<string>): Promise<Map<string, string>> {
    const names = [...new Set(nodes)];
    const ips = await Promise.all(names.map((n) => this.internalIP(n).catch(() => undefined)));
    const out = new Map<string, string>();
    names.forEach((n, i) => ips[i] && out.set(n, ips[i]));
    return out;
  }

  private async read(node: string): Promise<string | undefined> {
    try {
      const obj = await this.kube.resource<NodeObject>(GVR.nodes).get(undefined, node);
      const addresses = obj.status?.addresses ?? [];
      return (addresses.find((a) => a.type === 'InternalIP') ?? addresses[0])?.address || undefined;
    } catch (err) {
      // 403: the operator may not read nodes (a namespace-scoped install): node targeting then falls back to the seeds.
      if (err instanceof ApiError && (err.code === 404 || err.code === 403)) return undefined;
      throw err;
    }
  }
}
