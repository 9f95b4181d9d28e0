/**
 * peerload as an admin installs it, in a real two-node cluster (kubelets, containerd, CoreDNS, kube-proxy: the
 * cluster project's global set-up): Dragonfly as pods (its daemon a DaemonSet on both nodes, its cache on the
 * node), `helm install peerload charts/peerload` with the values an admin sets, Triton from
 * deploy/examples/triton-hardlink itself, and the ServedModel of deploy/examples/triton with the bucket's endpoint
 * filled in. The origin is MinIO on the machine behind a counting proxy on node 0's address. In order:
 *   - the model Ready on the Triton pods of both nodes, answering an inference; the weights read from the origin
 *     once; each pod's files hard links of its node daemon's cache; `kubectl get` and `describe` as the README
 *     shows them;
 *   - a ModelPreheat (deploy/examples/modelpreheat-objectstorage.yaml, for the next version) reaches SUCCESS;
 *   - scaled 2 → 4 over both nodes: the new pods serve the model, no Warning; a deleted pod's replacement too;
 *   - the operator's leader pod deleted mid-rollout: the other replica takes the lease and finishes it, each pod
 *     loading the version once; `helm upgrade` to a new image tag mid-rollout: the same;
 *   - the Triton pods drained off a node: the model is loaded where they land;
 *   - the ServedModel deleted: unloaded on every pod, its version directories removed.
 */
import { afterAll, beforeAll, describe, expect, inject, it, onTestFailed } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { dump, load } from 'js-yaml';
import { clusterKubectl, type Cluster, type ClusterInfo } from '../support/cluster.ts';
import {
  clusterReport,
  importClusterImages,
  installDragonfly,
  livePods,
  podReady,
  rolledOut,
  type ClusterImages,
  type ClusterPod,
  type InstalledDragonfly,
} from '../support/cluster-install.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { CHART, helm } from '../support/helm.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { waitFor } from '../support/process.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';
import { expectCrossings, PREHEATED_ON_BOTH } from '../support/origin-crossings.ts';

const run = promisify(execFile);
const NS = 'models';
const OPERATOR_NS = 'peerload-system';
const BUCKET = 'models';
const TOKEN = 'cluster-e2e-agent-token-0123456789abcdef';
const VERSIONS = ['1', '2', '3'] as const;
/** A version's objects; the weights large enough that each daemon downloads them in pieces from another peer. */
const filesOf = (v: string): Record<string, Buffer> => ({
  [`triton/echo/${v}/model.py`]: Buffer.from(ECHO_MODEL_PY),
  [`triton/echo/${v}/offset.json`]: Buffer.from(JSON.stringify({ offset: Number(v) })),
  [`triton/echo/${v}/weights.bin`]: Buffer.alloc(12 << 20, Number(v)),
});
/** The node volume both the daemons and the Triton pods mount (deploy/examples/triton-hardlink). */
const NODE_VOLUME = '/var/lib/dragonfly';

let info: ClusterInfo;
let kubectl: Cluster['kubectl'];
let dragonfly: InstalledDragonfly;
let images: ClusterImages;
let minio: MinIO;
let origin: CountingProxy;
let work: string;

const podsOf = (ns: string, selector: string) => livePods(kubectl, ns, selector);
const tritonPods = () => podsOf(NS, 'app.kubernetes.io/name=triton');

interface ServedModel {
  metadata: { generation: number };
  status?: {
    observedGeneration?: number;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    replicas?: { pod?: string; endpoint: string; version?: string; ready: boolean; node?: string }[];
  };
}
const servedModel = async () =>
  JSON.parse(await kubectl(['get', 'servedmodel', 'echo', '-n', NS, '-o', 'json'])) as ServedModel;
const atVersion = (sm: ServedModel, v: string) =>
  (sm.status?.replicas ?? []).filter((r) => r.ready && r.version === v).length;

/** The ServedModel Ready at `version` on exactly the `n` Triton pods there are, every one of them Ready. */
async function untilServed(n: number, version: string): Promise<ClusterPod[]> {
  return waitFor(
    `echo Ready at version ${version} on ${n} Triton pods`,
    async () => {
      const [pods, sm] = [await tritonPods(), await servedModel()];
      const isReady = sm.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      if (!isReady || sm.status?.observedGeneration !== sm.metadata.generation) return undefined;
      const names = new Set((sm.status?.replicas ?? []).map((r) => r.pod));
      const served = pods.length === n && pods.every((p) => podReady(p) && names.has(p.metadata.name));
      return served && atVersion(sm, version) === n ? pods : undefined;
    },
    { timeoutMs: 240_000, intervalMs: 1_000 },
  );
}

/** Each pod answers an inference with `version` (offset = version), and serves no other version of echo. */
async function expectAnswers(pods: ClusterPod[], version: string): Promise<void> {
  for (const pod of pods) {
    const server = { url: `http://${pod.status.podIP}:8000` };
    const v = Number(version);
    expect(await inferEcho(server, [1, 2])).toMatchObject({
      model_version: version,
      outputs: [{ data: [1 + v, 2 + v] }],
    });
    expect(await servedVersions(server, 'echo')).toEqual([version]);
  }
}

/** Each pod's weights of `version` are a hard link of a file in its own node daemon's cache. */
async function expectLinked(pods: ClusterPod[], version: string): Promise<void> {
  for (const pod of pods) {
    const placed = await stat(
      join(NODE_VOLUME, 'model-roots', pod.metadata.name, `echo/${version}/weights.bin`),
    );
    expect(placed.nlink, pod.metadata.name).toBeGreaterThanOrEqual(2);
    const cached = await inodesUnder(join(NODE_VOLUME, 'nodes', pod.spec.nodeName));
    expect(cached.has(placed.ino), `${pod.metadata.name}: a link into ${pod.spec.nodeName}'s cache`).toBe(
      true,
    );
  }
}

interface Event {
  type: string;
  reason: string;
  message: string;
  count?: number;
}
const servedModelEvents = async () =>
  (
    JSON.parse(
      await kubectl([
        'get',
        'events',
        '-n',
        NS,
        '--field-selector',
        'involvedObject.kind=ServedModel,involvedObject.name=echo',
        '-o',
        'json',
      ]),
    ) as { items: Event[] }
  ).items;

/**
 * No pod had `version` registered twice: the operator's ModelRegistered events for it (repeats counted) are at most
 * one per pod (none when a leader stopped between a load and its event), and Triton's own log ("loading:
 * echo:<version>", one line per load that names the version) shows at most one switch's loads: the load beside the
 * old version, the reload that sets the workers when they differ, the reload without the old version. A second
 * registration would load it beside itself again.
 */
async function expectRegisteredOnce(pods: ClusterPod[], version: string): Promise<void> {
  const events = await servedModelEvents();
  for (const p of pods) {
    const registered = events
      .filter(
        (e) =>
          e.reason === 'ModelRegistered' &&
          e.message.includes(`registered echo ${version} on pod ${p.metadata.name} `),
      )
      .reduce((n, e) => n + (e.count ?? 1), 0);
    expect(registered, p.metadata.name).toBeLessThanOrEqual(1);
  }
  const loads = await Promise.all(
    pods.map(async (p) => {
      const log = await kubectl(['logs', '-n', NS, p.metadata.name, '-c', 'triton']);
      return log.split('\n').filter((l) => l.includes(`"loading: echo:${version}"`)).length;
    }),
  );
  for (const n of loads) {
    expect(n, `Triton loads of ${version} per pod: ${loads.join(', ')}`).toBeGreaterThan(0);
    expect(n, `Triton loads of ${version} per pod: ${loads.join(', ')}`).toBeLessThanOrEqual(3);
  }
}

/** The operator pod holding the leader lease. */
async function leader(): Promise<string> {
  const leases = JSON.parse(await kubectl(['get', 'leases', '-n', OPERATOR_NS, '-o', 'json'])) as {
    items: { spec: { holderIdentity?: string } }[];
  };
  const operators = new Set(
    (await podsOf(OPERATOR_NS, 'app.kubernetes.io/name=peerload')).map((p) => p.metadata.name),
  );
  const holder = leases.items
    .map((l) => l.spec.holderIdentity ?? '')
    .find((h) => [...operators].some((pod) => h.startsWith(pod)));
  if (!holder) throw new Error('no operator pod holds a lease');
  return [...operators].find((pod) => holder.startsWith(pod))!;
}

/**
 * Sets spec.version and the version's files (one replica at a time, so a rollout lasts) and waits until the first
 * replica runs it.
 */
async function startRollout(version: string): Promise<void> {
  await kubectl([
    'patch',
    'servedmodel',
    'echo',
    '-n',
    NS,
    '--type=merge',
    '-p',
    JSON.stringify({
      spec: { version, files: { prefix: `triton/echo/${version}/` }, rollout: { maxConcurrent: 1 } },
    }),
  ]);
  await waitFor(
    `the first replica at version ${version}`,
    async () => atVersion(await servedModel(), version) > 0,
    {
      timeoutMs: 120_000,
      intervalMs: 200,
    },
  );
}

beforeAll(async () => {
  info = inject('cluster');
  kubectl = clusterKubectl(info);
  work = await mkdtemp(join(tmpdir(), 'peerload-cluster-install-'));
  images = await importClusterImages(info);

  // The origin: MinIO on the machine, reached by the pods through a counting proxy on node 0's address.
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  for (const v of VERSIONS)
    for (const [key, body] of Object.entries(filesOf(v))) await minio.putObject(BUCKET, key, body);
  origin = await startCountingProxy(minio.endpoint, info.nodes[0]!.ip);

  dragonfly = await installDragonfly(kubectl, images);

  // The install, as docs/operations.md has it: the manager's token in a Secret, then the chart with the values an
  // admin sets for this cluster (its manager, the token, and the S3-compatible store the models come from).
  await kubectl(['create', 'namespace', OPERATOR_NS]);
  await kubectl([
    'create',
    'secret',
    'generic',
    'dragonfly-token',
    '-n',
    OPERATOR_NS,
    `--from-literal=token=${dragonfly.token}`,
  ]);
  helmOperator('install', images.peerload.slice(images.peerload.lastIndexOf(':') + 1), [
    '--set',
    `manager.url=${dragonfly.inClusterURL}`,
    '--set',
    'manager.apiPath=/oapi/v1',
    '--set',
    'manager.tokenSecret=dragonfly-token',
    '--set-json',
    `allowedStorageHosts=${JSON.stringify([origin.url])}`,
  ]);

  // Triton from the example itself; only its two Secrets' placeholders are replaced, as the example asks.
  await kubectl(['create', 'namespace', NS]);
  const overlay = join(work, 'triton');
  await mkdir(overlay);
  await writeFile(
    join(overlay, 'kustomization.yaml'),
    dump({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      // kustomize takes a base outside the overlay by a relative path only.
      resources: [relative(overlay, join(REPO_ROOT, 'deploy/examples/triton-hardlink'))],
      patches: [
        secretPatch('triton-model-storage', { access_key: minio.accessKey, secret_key: minio.secretKey }),
        secretPatch('triton-agent-token', { token: TOKEN }),
        // The store is not one of the storage services' own hosts: the agent's allow-list names it, as the
        // example's comment says (the chart's allowedStorageHosts does the same for the operator).
        {
          target: { kind: 'Deployment', name: 'triton' },
          patch: dump([
            {
              op: 'add',
              path: '/spec/template/spec/containers/1/args/-',
              value: `--allowed-storage-hosts=${origin.url}`,
            },
          ]),
        },
      ],
    }),
  );
  await kubectl(['apply', '-k', overlay, '-n', NS]);
  await rolledOut(kubectl, NS, ['deployment/triton']);

  // The example's ServedModel with this store's endpoint.
  const sm = load(await readFile(join(REPO_ROOT, 'deploy/examples/triton/servedmodel.yaml'), 'utf8')) as {
    spec: { preheat: { objectStorage: Record<string, unknown> } };
  };
  Object.assign(sm.spec.preheat.objectStorage, { endpoint: origin.url, pathStyle: true });
  await kubectl(['apply', '-n', NS, '-f', '-'], { input: JSON.stringify(sm) });
}, 1_800_000);

/** `helm install|upgrade peerload charts/peerload` into the operator's namespace at an image tag, waiting for it. */
function helmOperator(verb: 'install' | 'upgrade', tag: string, values: string[] = []): void {
  helm([
    verb,
    'peerload',
    CHART,
    '--kubeconfig',
    info.kubeconfigPath,
    '--namespace',
    OPERATOR_NS,
    ...(verb === 'upgrade' ? ['--reuse-values'] : []),
    '--set',
    `image.tag=${tag}`,
    ...values,
    '--wait',
    '--timeout',
    '5m',
  ]);
}

function secretPatch(name: string, stringData: Record<string, string>): { patch: string } {
  return { patch: dump({ apiVersion: 'v1', kind: 'Secret', metadata: { name }, stringData }) };
}

afterAll(async () => {
  // The cluster goes with the run; what this file put on the machine goes now.
  await kubectl?.(['delete', 'namespace', NS, '--wait=true', '--timeout=120s']).catch(() => {});
  await origin?.close();
  await minio?.stop();
  await rm(work, { recursive: true, force: true });
  await rm(NODE_VOLUME, { recursive: true, force: true });
});

describe('peerload installed with Helm in a real two-node cluster', () => {
  // The cluster's state when a test fails: its pods, events, the ServedModel's status and the containers' logs.
  const report = () =>
    onTestFailed(async () => {
      console.log(
        await clusterReport(kubectl, {
          [NS]: 'app.kubernetes.io/name=triton',
          [OPERATOR_NS]: 'app.kubernetes.io/name=peerload',
          'dragonfly-system': 'component in (client,seed-client)',
        }),
      );
    });

  it('serves the model on the Triton pods of both nodes, the origin read once, each file a link of its node cache', async () => {
    report();
    const pods = await untilServed(2, '1');
    expect(new Set(pods.map((p) => p.spec.nodeName)).size).toBe(2);
    await expectAnswers(pods, '1');
    // The weights crossed from the origin once (the seed peer's fetch): both nodes' daemons had them from peers.
    // The small files, which never travel between peers, once per peer at most.
    expectCrossings(
      Object.entries(filesOf('1')).map(([key, body]) => [key, body.length]),
      (key) => origin.bytesServed(`/${BUCKET}/${key}`),
      PREHEATED_ON_BOTH,
    );
    await expectLinked(pods, '1');

    // What the README shows: the columns, and the events of a rollout.
    const table = await kubectl(['get', 'servedmodels', '-n', NS]);
    expect(table).toMatch(/^NAME\s+MODEL\s+VERSION\s+ROLLOUT\s+READY\s+REPLICAS\s+REASON\s+/);
    // A rollout no Staged strategy touched has no phase: the Rollout cell is empty.
    expect(table).toMatch(/\necho\s+echo\s+1\s+True\s+2\/2\s+AllReplicasReady\s/);
    const described = await kubectl(['describe', 'servedmodel', 'echo', '-n', NS]);
    expect(described).toMatch(/Normal\s+ModelRegistered\s+.*registered echo 1 on pod triton-\S+ \(http:\/\//);
    expect(described).toMatch(/Normal\s+Ready\s+.*echo is ready on 2\/2 replica\(s\)/);
    expect(described).not.toMatch(/Warning/);
  });

  it('preheats the next version with the ModelPreheat of deploy/examples', async () => {
    report();
    // The example, with this store's bucket, endpoint, keys and Secret.
    const preheat = load(
      await readFile(join(REPO_ROOT, 'deploy/examples/modelpreheat-objectstorage.yaml'), 'utf8'),
    ) as { spec: { objectStorage: Record<string, unknown> } };
    Object.assign(preheat.spec.objectStorage, {
      region: 'us-east-1',
      endpoint: origin.url,
      pathStyle: true,
      keys: Object.keys(filesOf('2')),
      credentialsSecretRef: { name: 'triton-model-storage' },
    });
    await kubectl(['apply', '-n', NS, '-f', '-'], { input: JSON.stringify(preheat) });
    await kubectl(
      [
        'wait',
        '-n',
        NS,
        'modelpreheat/bucket-models',
        '--for=jsonpath={.status.state}=SUCCESS',
        '--timeout=180s',
      ],
      { timeoutMs: 190_000 },
    );
    // The seed peer read each object: once.
    for (const [key, body] of Object.entries(filesOf('2')))
      expect(origin.bytesServed(`/${BUCKET}/${key}`)).toBeGreaterThanOrEqual(body.length);
    expect(await kubectl(['get', 'modelpreheats', '-n', NS])).toMatch(
      /\nbucket-models\s+file\s+SUCCESS\s+True\s/,
    );
  });

  it("scaled to 4 over both nodes, the new pods serve the model; a deleted pod's replacement too", async () => {
    report();
    await kubectl(['scale', '-n', NS, 'deployment/triton', '--replicas=4']);
    let pods = await untilServed(4, '1');
    expect(new Set(pods.map((p) => p.spec.nodeName)).size).toBe(2);
    await expectAnswers(pods, '1');
    await expectLinked(pods, '1');

    const gone = pods[0]!.metadata.name;
    await kubectl(['delete', 'pod', '-n', NS, gone, '--wait=true']);
    pods = await untilServed(4, '1');
    expect(pods.map((p) => p.metadata.name)).not.toContain(gone);
    await expectAnswers(pods, '1');
    await expectLinked(pods, '1');
    expect((await servedModelEvents()).filter((e) => e.type === 'Warning')).toEqual([]);
  });

  it('finishes a rollout whose leader pod is deleted mid-way: the other replica takes over, one load per pod', async () => {
    report();
    const before = await leader();
    await startRollout('2');
    const midway = atVersion(await servedModel(), '2');
    await kubectl(['delete', 'pod', '-n', OPERATOR_NS, before, '--wait=false']);
    expect(midway).toBeLessThan(4);

    const pods = await untilServed(4, '2');
    expect(await leader()).not.toBe(before);
    await expectAnswers(pods, '2');
    await expectLinked(pods, '2');
    await expectRegisteredOnce(pods, '2');
  });

  it('finishes a rollout through a helm upgrade to a new image tag, one load per pod', async () => {
    report();
    // The same image under a new tag, as a release would bring one.
    const tag = 'upgrade-e2e';
    await Promise.all(
      info.nodes.map((n) =>
        run('ctr', [
          '--address',
          n.containerdSocket,
          '-n',
          'k8s.io',
          'images',
          'tag',
          '--force',
          images.peerload,
          `ghcr.io/peerload/peerload:${tag}`,
        ]),
      ),
    );
    await startRollout('3');
    helmOperator('upgrade', tag);
    const operators = await podsOf(OPERATOR_NS, 'app.kubernetes.io/name=peerload');
    expect(operators.length).toBe(2);

    const pods = await untilServed(4, '3');
    await expectAnswers(pods, '3');
    await expectRegisteredOnce(pods, '3');
  });

  it('loads the model where the pods land when a node is drained of them', async () => {
    report();
    const node = info.nodes[1]!.name;
    // The Triton pods only: Dragonfly's MariaDB and manager keep their state in the pod here (no volumes).
    await kubectl(['cordon', node]);
    try {
      await kubectl(
        [
          'drain',
          node,
          '--pod-selector=app.kubernetes.io/name=triton',
          '--delete-emptydir-data',
          '--timeout=180s',
        ],
        { timeoutMs: 190_000 },
      );
      const pods = await untilServed(4, '3');
      expect(pods.every((p) => p.spec.nodeName !== node)).toBe(true);
      await expectAnswers(pods, '3');
      await expectLinked(pods, '3');
    } finally {
      await kubectl(['uncordon', node]);
    }
  });

  it('unloads the model from every pod and removes its files when the ServedModel is deleted', async () => {
    report();
    const pods = await tritonPods();
    await kubectl(['delete', 'servedmodel', 'echo', '-n', NS, '--wait=true', '--timeout=180s'], {
      timeoutMs: 190_000,
    });
    for (const pod of pods) {
      expect(await servedVersions({ url: `http://${pod.status.podIP}:8000` }, 'echo')).toEqual([]);
      const left = await readdir(join(NODE_VOLUME, 'model-roots', pod.metadata.name, 'echo'));
      expect(left.filter((f) => /^\d+$/.test(f))).toEqual([]);
    }
  });
});

/** The inode numbers of every regular file under `dir`. */
async function inodesUnder(dir: string): Promise<Set<number>> {
  const found = new Set<number>();
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    found.add((await stat(join(e.parentPath, e.name))).ino);
  }
  return found;
}
