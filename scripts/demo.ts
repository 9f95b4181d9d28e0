/**
 * The main job on a local default (`npm run demo`): everything on loopback, nothing faked in peerload itself.
 *
 *   real kube-apiserver + etcd ── the CRDs ── `peerload operator` (a child process, the real CLI)
 *   Azurite (Azure Blob Storage, npm; verifies SAS signatures) holding a small model archive
 *   the P2P network: emulators (a manager, a seed peer, and a node peer that asks the seed peer before the
 *   origin), or with `--real-p2p` the real Dragonfly network built from source (test/support/dragonfly.ts:
 *   manager and scheduler v2.5.1, dfdaemon 1.4.2 as seed peer and two node peers, MariaDB, Redis)
 *   model servers: 3 emulated replicas and 1 real TorchServe 0.12.0 with the peerload plugin
 *
 * It applies a ServedModel that preheats its archive (`preheat.create`) and registers it on the four replicas,
 * plus a ModelPreheat of a plain URL, waits for Ready and Succeeded, prints the time from apply to Ready next to
 * one direct download of the archive, what `kubectl get` and `kubectl describe` show, and ends with the
 * origin-bytes and cache-hit counters. `--keep` leaves it running.
 *
 * With `--real-p2p` the replicas are found as in a cluster: a Service whose EndpointSlices name each replica's Node,
 * whose InternalIP is the address of the node peer the replica downloads through (two Nodes, two replicas each), so
 * the owned preheat targets those nodes' peers. Slices may not hold loopback addresses: they carry 198.18.x.y, and
 * the operator runs in this process with a dispatcher that connects to 127.0.0.1 instead (as the e2e tests do);
 * a child process could not be given one. Its log goes to a file all the same.
 */
import * as k8s from '@kubernetes/client-node';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane } from '../test/support/controlplane.ts';
import { createNamespace, installCRDs, kubeConfig, REPO_ROOT } from '../test/support/kube.ts';
import { startCountingProxy } from '../test/support/counting-proxy.ts';
import { startAzurite } from '../test/support/azurite.ts';
import { startDragonfly } from '../test/support/dragonfly.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../test/support/endpointslices.ts';
import { startManager } from '../test/support/runtime-harness.ts';
import { modelPreheatController } from '../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../src/controllers/index.ts';
import { createLogger } from '../src/runtime/index.ts';
import { createWriteStream } from 'node:fs';
import { request } from 'undici';
import { startManagerEmulator } from '../test/support/manager-emulator.ts';
import { buildLargeModelArchive, buildModelArchive } from '../test/support/model-archive.ts';
import { startModelServerFleet } from '../test/support/modelserver-emulator.ts';
import { startOrigin } from '../test/support/origin.ts';
import { startPeerProxy } from '../test/support/peer-proxy.ts';
import { startProcess, type ManagedProcess } from '../test/support/process.ts';
import { loopbackOperatorFlags } from '../test/support/loopback-profile.ts';
import { startTorchServe, type TorchServe } from '../test/support/torchserve.ts';
import { azuritePluginConfig, pluginJar, writePluginConfig } from '../test/support/plugin.ts';
import { effectiveFilter } from '../src/storage/objecturl.ts';
import { signObjectURL } from '../src/storage/sign.ts';
import { credentialTag } from '../src/storage/credential-tag.ts';

const { values } = parseArgs({
  options: {
    keep: { type: 'boolean' },
    'no-torchserve': { type: 'boolean' },
    'real-p2p': { type: 'boolean' },
  },
});
const CONTAINER = 'models';
const KEY = 'resnet/tiny.mar';
const step = (text: string) => console.log(`\n== ${text}`);
const stops: (() => Promise<unknown>)[] = [];
/** The operator's log file, and its process when it runs as one: what a failure shows and watches. */
let operatorLog: string | undefined;
let operatorProcess: ManagedProcess | undefined;

/**
 * Why the demo stopped, in the words the user reads: the object's condition (reason and message) or what the
 * operator did. No stack trace: nothing here is a bug of the demo.
 */
class DemoFailure extends Error {}

let failed = false;
try {
  step('control plane');
  const cp = await startControlPlane();
  stops.push(() => cp.stop());
  await installCRDs(cp.kubeconfigPath);
  const kc = kubeConfig(cp.kubeconfigPath);
  console.log(`kube-apiserver ${cp.version} at ${cp.server}; CRDs installed`);
  const ns = await createNamespace(kc, 'demo');
  const work = await mkdtemp(join(tmpdir(), 'peerload-demo-'));
  stops.push(() => rm(work, { recursive: true, force: true }));

  step('object storage and the P2P network');
  const storage = await startAzurite();
  stops.push(() => storage.stop());
  await storage.createContainer(CONTAINER);
  // The real peer daemon fetches content up to its 4 MiB minimum piece length straight from the origin, so on the
  // real network the objects are larger than that (docs/dragonfly.md).
  const real = values['real-p2p'] === true;
  const small = await buildModelArchive(work, { modelName: real ? 'tiny-small' : 'tiny' });
  const archive = real ? await buildLargeModelArchive(small, work, 'tiny', 6 << 20) : small;
  const archiveBytes = await readFile(archive.path);
  await storage.putBlob(CONTAINER, KEY, archiveBytes);
  const files = await startOrigin({ '/llm/shard-00001.safetensors': Buffer.alloc((real ? 8 : 4) << 20, 7) });
  stops.push(() => files.close());
  // The P2P network: its manager, the node peer every replica downloads through, and what the origins served.
  const p2p = values['real-p2p'] ? await realNetwork() : await emulatedNetwork();
  console.log(
    `Azurite ${storage.endpoint} (abs ${storage.accountName}/${CONTAINER}/${KEY}, ${archiveBytes.length} bytes)`,
  );
  console.log(`manager ${p2p.managerURL}, node peers ${p2p.nodePeerURLs.join(', ')}${p2p.description}`);

  async function emulatedNetwork() {
    const seedPeer = await startPeerProxy();
    const nodePeer = await startPeerProxy({ parent: seedPeer.url });
    // No job latency: the emulated job fetches at its end, where the real seed peer starts within a second of the
    // create (and the real scheduler has it fetch whatever a node peer asks first), so replicas that register once
    // the job exists would miss on a seed peer that has not started yet, which the real network does not do.
    const manager = await startManagerEmulator({ peer: seedPeer });
    stops.push(
      () => manager.close(),
      () => nodePeer.close(),
      () => seedPeer.close(),
    );
    return {
      managerURL: manager.url,
      /** The node peers, one per node: replica i downloads through `nodePeerURLs[nodeOf(i)]`. */
      nodePeerURLs: [nodePeer.url],
      nodeIPs: [] as string[],
      storageEndpoint: storage.endpoint,
      description: ` (emulators; seed peer ${seedPeer.url})`,
      operatorFlags: [] as string[],
      originBytes: () => seedPeer.stats.originBytes + nodePeer.stats.originBytes,
      downloads: () => nodePeer.requests.filter((r) => r.method === 'GET').map((r) => r.taskID),
      hits: () =>
        `cache hits: ${nodePeer.stats.localHits + nodePeer.stats.remoteHits}, misses: ${nodePeer.stats.cacheMisses}`,
    };
  }

  async function realNetwork() {
    const network = await startDragonfly({ nodePeers: 2 });
    stops.push(() => network.stop());
    // Azurite behind a counting proxy (a SAS signs no host): what the origin served, counted.
    const counted = await startCountingProxy(storage.endpoint);
    stops.push(() => counted.close());
    const token = await network.createPersonalAccessToken('peerload-demo', ['job', 'cluster']);
    await kc.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({
      namespace: ns,
      body: { metadata: { name: 'manager-token' }, stringData: { token } },
    });
    return {
      managerURL: network.managerURL,
      nodePeerURLs: network.peers.map((p) => p.proxyURL),
      nodeIPs: network.peers.map((p) => p.ip),
      storageEndpoint: counted.url,
      description: ` (real Dragonfly v2.5.1; seed peer ${network.seedPeer!.proxyURL}, logs in ${network.dir})`,
      operatorFlags: ['--manager-api-path', '/oapi/v1', '--manager-token-secret', `${ns}/manager-token`],
      originBytes: () => counted.bytesServed(KEY) + files.stats.bytes,
      downloads: () => fleet.instances.flatMap((srv) => srv.downloads.map((d) => d.taskID)),
      hits: () => 'hits as the real daemon reports them: see the task ids',
    };
  }

  step('model servers');
  const location = { ...storage.location(CONTAINER), endpoint: p2p.storageEndpoint };
  const credentials = storage.credentials();
  const signed = await signObjectURL(location, KEY, credentials, { expiresSeconds: 3600 });
  // Replicas 0 and 1 on the first node, 2 and TorchServe on the last (one node on the emulated network).
  const nodeOf = (i: number) => Math.min(Math.floor(i / 2), p2p.nodePeerURLs.length - 1);
  const fleet = await startModelServerFleet(3, (i) => ({
    proxyURL: p2p.nodePeerURLs[nodeOf(i)]!,
    objectURL: () => signed.url,
    filter: [...effectiveFilter(location)],
    // As the plugin: the tag the storage credentials give, so the replicas join the owned preheat's task (an
    // untagged GET is another task, which the real daemon fetches from the origin again).
    tag: credentialTag(location, credentials),
    workerStartMs: 500,
  }));
  stops.push(() => fleet.close());
  const endpoints = [...fleet.urls];
  let ts: TorchServe | undefined;
  if (!values['no-torchserve']) {
    const jar = await pluginJar();
    const config = join(work, 'p2p-endpoint.json');
    const pluginConfig = azuritePluginConfig(storage, CONTAINER, p2p.nodePeerURLs[nodeOf(3)]!);
    await writePluginConfig(config, {
      ...pluginConfig,
      object_storage: { ...(pluginConfig['object_storage'] as object), endpoint: p2p.storageEndpoint },
    });

    ts = await startTorchServe({ pluginJars: [jar], env: { P2P_ENDPOINT_CONFIG: config }, tokenAuth: false });
    stops.push(() => ts!.stop());
    endpoints.push(ts.managementURL);
  }
  console.log(
    `${fleet.urls.length} emulated replicas${ts ? ` + TorchServe 0.12.0 at ${ts.managementURL}` : ''}`,
  );

  // On the real network the replicas are a Service's endpoints on Nodes whose InternalIPs are the node peers.
  let modelServer: { endpoints: string[] } | { service: { name: string } } = { endpoints };
  if (real) {
    const svc = new ServiceEndpoints(kc, ns, 'models');
    for (const [i, ip] of p2p.nodeIPs.entries()) await ServiceEndpoints.createNode(kc, `${ns}-node-${i}`, ip);
    for (const [i, url] of endpoints.entries())
      await svc.add(`models-${i}`, url, true, `${ns}-node-${nodeOf(i)}`);
    modelServer = { service: { name: 'models' } };
    console.log(
      `Service models: ${endpoints.length} endpoints on ${p2p.nodeIPs.length} Nodes (InternalIPs ${p2p.nodeIPs.join(', ')}: the node peers)`,
    );
  }

  step('peerload operator');
  operatorLog = join(work, 'operator.log');
  // Everything the demo runs listens on loopback, which the operator's cluster defaults refuse: the loopback
  // profile (test/support/loopback-profile.ts) is the one list of what such a set-up allows.
  const operatorArgs = [
    '--manager-url',
    p2p.managerURL,
    ...p2p.operatorFlags,
    '--no-leader-elect',
    '--poll-backoff-start',
    '500ms',
    '--poll-backoff-max',
    '5s',
  ];
  if (real) {
    const log = createWriteStream(operatorLog);
    // startManager puts the loopback profile before these flags.
    const operator = await startManager(
      kc,
      [...operatorArgs, '--log-level', 'info'],
      [
        modelPreheatController,
        (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() }),
      ],
      { logger: createLogger('info', log) },
    );
    stops.unshift(
      () => operator.stop(),
      () => new Promise((resolve) => log.end(resolve)),
    );
    console.log(`running in this process (log: ${operatorLog})`);
  } else {
    const operator = startProcess(
      'peerload operator',
      process.execPath,
      [
        join(REPO_ROOT, 'bin/peerload.js'),
        'operator',
        '--kubeconfig',
        cp.kubeconfigPath,
        ...loopbackOperatorFlags(),
        ...operatorArgs,
      ],
      operatorLog,
    );
    operatorProcess = operator;
    stops.unshift(() => operator.stop());
    console.log(`running (log: ${operatorLog})`);
  }

  // The reference for the time to Ready: one direct download of the archive from the origin (no peer).
  const direct = await signObjectURL(storage.location(CONTAINER), KEY, credentials, { expiresSeconds: 3600 });
  const directStarted = performance.now();
  const directBytes = (await (await request(direct.url)).body.arrayBuffer()).byteLength;
  const directMs = performance.now() - directStarted;

  step('kubectl apply');
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNamespacedSecret({
    namespace: ns,
    body: {
      metadata: { name: 'abs-credentials' },
      stringData: { account_key: storage.accountKey },
    },
  });
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const apply = async (kind: string, name: string, spec: unknown) => {
    await objects.create({
      apiVersion: 'peerload.io/v1alpha1',
      kind,
      metadata: { name, namespace: ns },
      spec,
    } as k8s.KubernetesObject);
    console.log(`${kind.toLowerCase()}.peerload.io/${name} created`);
  };
  await apply('ModelPreheat', 'llm-shard', {
    url: `${files.url}/llm/shard-00001.safetensors?Expires=1&Signature=abc`,
    filteredQueryParams: ['Expires', 'Signature'],
  });
  const applied = performance.now();
  const appliedAt = Date.now();
  await apply('ServedModel', 'tiny', {
    modelName: 'tiny',
    fileName: KEY,
    modelServer,
    workers: { min: 1 },
    preheat: {
      create: true,
      objectStorage: { ...location, credentialsSecretRef: { name: 'abs-credentials' } },
    },
  });

  step('waiting for Ready and Succeeded');
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const get = (plural: string, name: string) =>
    custom.getNamespacedCustomObject({
      group: 'peerload.io',
      version: 'v1alpha1',
      namespace: ns,
      plural,
      name,
    }) as Promise<{ status?: { conditions?: Condition[]; jobID?: number } }>;
  /**
   * Waits for the condition `type` of an object to be True. Fails at once, naming the condition, when the object is
   * Stalled (nothing progresses without a change: a refused host, an invalid spec, a failed job) or the operator
   * exits; at the time-out it names the conditions the object had.
   */
  const untilTrue = async (
    kind: string,
    plural: string,
    name: string,
    type: string,
    timeoutMs: number,
    each?: () => Promise<void>,
  ) => {
    const deadline = Date.now() + timeoutMs;
    let conditions: Condition[];
    for (;;) {
      if (operatorProcess && operatorProcess.child.exitCode !== null)
        throw new DemoFailure(`the operator exited with code ${operatorProcess.child.exitCode}`);
      await each?.();
      conditions = (await get(plural, name).catch(() => undefined))?.status?.conditions ?? [];
      if (conditions.some((c) => c.type === type && c.status === 'True')) return;
      const stalled = conditions.find((c) => c.type === 'Stalled' && c.status === 'True');
      if (stalled)
        throw new DemoFailure(
          `${kind} ${name} is Stalled: ${stalled.reason}: ${stalled.message}\n` +
            `(nothing will progress without a change to the spec or the operator's flags)`,
        );
      if (Date.now() > deadline)
        throw new DemoFailure(
          `${kind} ${name} was not ${type} within ${timeoutMs / 1000} s; its conditions:\n` +
            (conditions
              .map((c) => `  ${c.type}=${c.status} ${c.reason ?? ''}: ${c.message ?? ''}`)
              .join('\n') || '  (none: the operator never wrote its status)'),
        );
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  // Where the time goes: when the owned preheat's job is first seen (the replicas' gate opens on it).
  let jobSeenMs: number | undefined;
  const jobSeen = async () => {
    if (jobSeenMs !== undefined) return;
    const preheat = await get('modelpreheats', 'tiny-preheat').catch(() => undefined);
    if (preheat?.status?.jobID !== undefined) jobSeenMs = performance.now() - applied;
  };
  await untilTrue('ServedModel', 'servedmodels', 'tiny', 'Ready', 300_000, jobSeen);
  const readyMs = performance.now() - applied;
  console.log(
    `ServedModel tiny Ready ${(readyMs / 1000).toFixed(1)} s after apply, on ${endpoints.length} replicas` +
      `; one direct download of its ${directBytes}-byte archive from the origin: ${(directMs / 1000).toFixed(2)} s`,
  );
  // The replicas join the owned preheat's tasks once its job exists, so the ServedModel can be Ready while the
  // real manager still reports that job PENDING: the tables below show both preheats once they have succeeded.
  for (const preheat of ['llm-shard', 'tiny-preheat'])
    await untilTrue('ModelPreheat', 'modelpreheats', preheat, 'Succeeded', 120_000);

  for (const plural of ['modelpreheats', 'servedmodels']) {
    console.log(`\n$ kubectl get ${plural} -n ${ns}`);
    console.log(await getTable(kc, ns, plural));
  }
  console.log(`\n$ kubectl describe servedmodel tiny -n ${ns}   (events)`);
  const events = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  const ofTiny = events.items.filter((x) => x.regarding?.name === 'tiny');
  for (const e of ofTiny) console.log(`  ${e.type}\t${e.reason}\t${e.note}`);
  // Each registration's Event time (microseconds) against the apply: which replica was last, and by how much.
  const seconds = (ms: number | undefined) => (ms === undefined ? 'not seen' : `${(ms / 1000).toFixed(1)} s`);
  const registered = ofTiny
    .filter((e) => e.reason === 'ModelRegistered' && e.eventTime)
    .map(
      (e) =>
        [
          // `on pod <name>` behind a Service, `on <url>` for static endpoints.
          /\bon (?:pod )?(\S+)/.exec(e.note ?? '')?.[1] ?? '?',
          new Date(e.eventTime!).getTime() - appliedAt,
        ] as const,
    )
    .sort((a, b) => a[1] - b[1]);
  console.log(
    `\nwhere the time went (after apply): the preheat's job seen ${seconds(jobSeenMs)}; registered ` +
      `${registered.map(([pod, ms]) => `${pod}${pod === `models-${endpoints.length - 1}` && ts ? ' (TorchServe)' : ''} ${seconds(ms)}`).join(', ')}; ` +
      `Ready ${seconds(readyMs)}`,
  );

  step('the P2P network');
  const downloads = p2p.downloads();
  const shardBytes = files.files.get('/llm/shard-00001.safetensors')!.length;
  const originBytes = p2p.originBytes();
  console.log(`objects: model archive ${archiveBytes.length} bytes, LLM shard ${shardBytes} bytes`);
  console.log(
    `bytes served by the origins:        ${originBytes} (each object once: ${onceEach(originBytes - archiveBytes.length - shardBytes)})`,
  );
  console.log(`replica downloads via node peer:    ${downloads.length} (${p2p.hits()})`);

  /**
   * The real daemon probes the origin with a 1-byte range request on every download, hit or not: one per replica
   * (TorchServe's too) and one per peer a preheat ran on (the seed peer and the node peers), for each object.
   */
  function onceEach(extra: number): string {
    if (extra === 0) return 'yes';
    return extra > 0 && extra <= endpoints.length + 2 * (p2p.nodePeerURLs.length + 1)
      ? `yes, plus ${extra} bytes of the daemon's 1-byte probes`
      : 'NO';
  }
  console.log(`distinct task ids of those:         ${new Set(downloads).size}`);

  if (values.keep) {
    console.log(`\nleft running: export KUBECONFIG=${cp.kubeconfigPath}  (Ctrl-C to stop)`);
    await new Promise((resolve) => process.once('SIGINT', resolve));
  }
} catch (err) {
  failed = true;
  // A stack trace helps whoever debugs the demo itself, not its user: shown only with DEBUG set.
  const error = err as Error;
  console.error(
    `\ndemo FAILED: ${error instanceof DemoFailure || !process.env.DEBUG ? error.message : error.stack}`,
  );
  if (operatorLog) console.error(`\nthe operator's log, last lines:\n${await logTail(operatorLog)}`);
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
}
if (failed) process.exit(1);

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

/** The last lines of a log, each cut to a screen's width. */
async function logTail(path: string, lines = 15): Promise<string> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((l) => `  ${l.length > 400 ? `${l.slice(0, 400)}…` : l}`)
    .join('\n');
}

/** What `kubectl get` prints: the apiserver's Table rendering of the CRD's printer columns. */
async function getTable(kc: k8s.KubeConfig, namespace: string, plural: string): Promise<string> {
  const table = (await kc
    .makeApiClient(k8s.CustomObjectsApi)
    .listNamespacedCustomObject(
      { group: 'peerload.io', version: 'v1alpha1', namespace, plural },
      k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io'),
    )) as { columnDefinitions: { name: string; priority: number }[]; rows: { cells: unknown[] }[] };
  const keep = table.columnDefinitions.map((c, i) => [c, i] as const).filter(([c]) => c.priority === 0);
  const rows = [
    keep.map(([c]) => c.name.toUpperCase()),
    ...table.rows.map((r) =>
      keep.map(([, i]) =>
        r.cells[i] === undefined || r.cells[i] === null || r.cells[i] === '' ? '<none>' : String(r.cells[i]),
      ),
    ),
  ];
  const widths = keep.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]! + 3))
        .join('')
        .trimEnd(),
    )
    .join('\n');
}
