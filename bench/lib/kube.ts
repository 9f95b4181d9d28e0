/** The benchmark's own apiserver client (the runtime's undici client: one pool, JSON) and a few helpers. */
import { randomBytes } from 'node:crypto';
import { GVR } from '../../src/api/index.ts';
import { KubeClient, type Gvr, type KubeObject, type RequestRecord } from '../../src/runtime/index.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { rbacOf } from '../../test/support/runtime-harness.ts';
import { sleep } from './report.ts';
import { request } from 'undici';

export { GVR };

export const NAMESPACES: Gvr = {
  group: '',
  version: 'v1',
  resource: 'namespaces',
  kind: 'Namespace',
  namespaced: false,
};

export function benchClient(cp: ControlPlane): KubeClient {
  return new KubeClient(kubeConfig(cp.kubeconfigPath));
}

export async function newNamespace(kube: KubeClient, prefix: string): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  await kube.resource(NAMESPACES).create({ metadata: { name } } as KubeObject);
  return name;
}

/** Deletes every object of `gvr` in `namespace` (deletecollection; no garbage collector runs here). */
export async function deleteAll(kube: KubeClient, gvr: Gvr, namespace: string): Promise<void> {
  const path = kube.resource(gvr).path(namespace);
  await kube.request('DELETE', path, { timeoutMs: 120_000 }).catch(() => undefined);
}

/**
 * Watches `gvr` in `namespace` from now on and calls `onEvent` with each object and the local time it arrived
 * (performance.now()). Restarts the stream if the server closes it. Returns a stop function.
 */
export function watchObjects<T extends KubeObject>(
  kube: KubeClient,
  gvr: Gvr,
  namespace: string,
  onEvent: (type: string, obj: T, at: number) => void,
): { stop(): void; ready: Promise<void> } {
  const abort = new AbortController();
  const client = kube.resource<T>(gvr);
  let rv = '';
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((r) => (markReady = r));
  void (async () => {
    const list = await client.list(namespace, { limit: 1 });
    rv = list.metadata.resourceVersion ?? '';
    markReady();
    while (!abort.signal.aborted) {
      try {
        await client.watch(
          namespace,
          { resourceVersion: rv, allowWatchBookmarks: true, timeoutSeconds: 600 },
          (ev) => {
            const at = performance.now();
            if (ev.object?.metadata?.resourceVersion) rv = ev.object.metadata.resourceVersion;
            if (ev.type !== 'BOOKMARK' && ev.type !== 'ERROR') onEvent(ev.type, ev.object, at);
          },
          { signal: abort.signal },
        );
      } catch {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();
  return { stop: () => abort.abort(), ready };
}

/** Operator writes (non-GET, non-watch) on `resource` (and its subresources) and on events, from `requests`. */
export function countWrites(
  requests: RequestRecord[],
  resource: string,
): { resource: number; events: number; byVerb: Record<string, number> } {
  let res = 0;
  let events = 0;
  const byVerb: Record<string, number> = {};
  for (const r of requests) {
    if (r.watch || r.method === 'GET') continue;
    const { verb, resource: rs } = rbacOf(r);
    if (rs === resource || rs.startsWith(`${resource}/`)) {
      res++;
      byVerb[`${verb} ${rs}`] = (byVerb[`${verb} ${rs}`] ?? 0) + 1;
    } else if (rs === 'events') events++;
  }
  return { resource: res, events, byVerb };
}

/**
 * `apiserver_request_total` from the apiserver's own /metrics (admin token), summed by `verb resource[/sub]`.
 * Non-resource requests (such as this scrape of /metrics) have an empty resource and are dropped.
 */
export async function apiserverRequestTotals(cp: ControlPlane): Promise<Map<string, number>> {
  const { Agent } = await import('undici');
  const dispatcher = new Agent({ connect: { ca: cp.caPEM } });
  try {
    const res = await request(`${cp.server}/metrics`, {
      headers: { authorization: `Bearer ${cp.adminToken}` },
      dispatcher,
    });
    const text = await res.body.text();
    const out = new Map<string, number>();
    for (const line of text.split('\n')) {
      if (!line.startsWith('apiserver_request_total{')) continue;
      const labels = Object.fromEntries(
        [...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!] as const),
      );
      if (!labels['resource']) continue;
      const key = `${labels['verb']} ${labels['resource']}${labels['subresource'] ? `/${labels['subresource']}` : ''}`;
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      out.set(key, (out.get(key) ?? 0) + value);
    }
    return out;
  } finally {
    await dispatcher.close();
  }
}

export function diffTotals(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) {
    const d = v - (before.get(k) ?? 0);
    if (d > 0) out[k] = d;
  }
  return out;
}

/** `Ready=True` among the object's status conditions. */
export function isReady(obj: KubeObject): boolean {
  const conditions = (obj['status'] as { conditions?: { type: string; status: string }[] } | undefined)
    ?.conditions;
  return conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** Deletes a ServedModel and waits until it is gone (its finalizer has run), at most 60 s. */
export async function deleteServedModelAndWait(kube: KubeClient, ns: string, name: string): Promise<void> {
  const sm = kube.resource(GVR.servedModels);
  await sm.delete(ns, name).catch(() => undefined);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      await sm.get(ns, name);
    } catch {
      return;
    }
    await sleep(200);
  }
  throw new Error(`ServedModel ${name} not deleted within 60 s`);
}

/** Creates object `name` of `gvr` in `ns` with `fields` (its spec, its stringData...). */
function createIn(
  kube: KubeClient,
  gvr: Gvr,
  ns: string,
  name: string,
  fields: Record<string, unknown>,
): Promise<KubeObject> {
  const apiVersion = gvr.group ? `${gvr.group}/${gvr.version}` : gvr.version;
  return kube
    .resource(gvr)
    .create({ apiVersion, kind: gvr.kind, metadata: { name, namespace: ns }, ...fields } as KubeObject);
}

type Create = (
  kube: KubeClient,
  ns: string,
  name: string,
  body: Record<string, unknown>,
) => Promise<KubeObject>;

/** A Secret of `stringData`. */
export const createSecret: Create = (kube, ns, name, stringData) =>
  createIn(kube, GVR.secrets, ns, name, { stringData });

/** A ServedModel of `spec`. */
export const createServedModel: Create = (kube, ns, name, spec) =>
  createIn(kube, GVR.servedModels, ns, name, { spec });

/**
 * The operator's flags in a benchmark: its one namespace, no leader election, the manager at `managerURL` (if any),
 * polls backing off from `backoffStart` to 2 s, then `extra`.
 */
export function operatorFlags(
  ns: string,
  o: { managerURL?: string; backoffStart: string; extra?: string[] },
): string[] {
  return [
    '--no-leader-elect',
    '--namespace',
    ns,
    ...(o.managerURL ? ['--manager-url', o.managerURL] : []),
    '--poll-backoff-start',
    o.backoffStart,
    '--poll-backoff-max',
    '2s',
    ...(o.extra ?? []),
  ];
}
