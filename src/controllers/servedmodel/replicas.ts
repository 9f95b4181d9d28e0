/**
 * Which model-server replicas a ServedModel is about: every ready endpoint of its Service (from the
 * EndpointSlices, so no Service or Pod reads are needed), or a static list of URLs.
 */
import type { ServedModelSpec } from '../../api/index.ts';
import type { KubeObject } from '../../runtime/index.ts';

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export interface Replica {
  /** Management base URL, e.g. http://10.0.0.7:8081: the identity of the replica in status. */
  endpoint: string;
  pod?: string;
  podUID?: string;
  /** The pod's node (EndpointSlice nodeName): where its peer daemon runs. */
  node?: string;
}

export interface EndpointSlice extends KubeObject {
  addressType?: string;
  endpoints?: {
    addresses: string[];
    conditions?: { ready?: boolean | null; serving?: boolean | null; terminating?: boolean | null };
    targetRef?: { kind?: string; name?: string; uid?: string; namespace?: string };
    nodeName?: string | null;
  }[];
  ports?: { name?: string | null; port?: number | null; protocol?: string | null }[] | null;
}

export type PortMatch = { found: true; port: number } | { found: false; why: string };

/** The slice's port for the Service port of the spec: by name, or by number (the endpoint's port). */
export function slicePort(slice: EndpointSlice, port: string | number): PortMatch {
  const ports = slice.ports ?? [];
  const match =
    typeof port === 'number'
      ? ports.find((p) => p.port === port)
      : ports.find((p) => (p.name ?? '') === port);
  if (match?.port) return { found: true, port: match.port };
  const have = ports.map((p) => (p.name ? `${p.name}=${p.port}` : String(p.port))).join(', ') || 'none';
  return { found: false, why: `the Service has no port ${JSON.stringify(port)} (its ports: ${have})` };
}

export interface Discovery {
  replicas: Replica[];
  /** Why no replica could be found, when that is a configuration problem rather than "no pods yet". */
  problem?: string;
  /**
   * Nodes of pods that are scheduled but not ready yet (starting model servers): their peers can be preheated
   * before the model server asks for the model.
   */
  startingNodes: string[];
}

export function discoverReplicas(spec: ServedModelSpec, slices: readonly EndpointSlice[]): Discovery {
  const ms = spec.modelServer;
  if (ms.endpoints)
    return { replicas: ms.endpoints.map((e) => ({ endpoint: e.replace(/\/+$/, '') })), startingNodes: [] };
  const seen = new Map<string, Replica>();
  const starting = new Set<string>();
  let problem: string | undefined;
  for (const slice of slices) {
    if (slice.addressType === 'FQDN') continue;
    const port = slicePort(slice, ms.service!.port);
    if (!port.found) {
      problem = port.why;
      continue;
    }
    for (const ep of slice.endpoints ?? []) {
      // Ready unset means ready (EndpointSlice API); terminating pods are not replicas to converge.
      if (ep.conditions?.terminating === true) continue;
      if (ep.conditions?.ready === false) {
        if (ep.nodeName) starting.add(ep.nodeName);
        continue;
      }
      const address = ep.addresses[0];
      if (!address) continue;
      const host = slice.addressType === 'IPv6' ? `[${address}]` : address;
      const endpoint = `${ms.scheme}://${host}:${port.port}`;
      seen.set(endpoint, {
        endpoint,
        ...(ep.targetRef?.name ? { pod: ep.targetRef.name } : {}),
        ...(ep.targetRef?.uid ? { podUID: ep.targetRef.uid } : {}),
        ...(ep.nodeName ? { node: ep.nodeName } : {}),
      });
    }
  }
  const replicas = [...seen.values()].sort((a, b) => a.endpoint.localeCompare(b.endpoint));
  const startingNodes = [...starting].sort();
  return replicas.length === 0 && problem
    ? { replicas, problem, startingNodes }
    : { replicas, startingNodes };
}
