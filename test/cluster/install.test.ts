/**
 * peerload as an admin installs it, in a real two-node cluster (kubelets, containerd, CoreDNS, kube-proxy: the
 * cluster project's global set-up): Dragonfly as pods (its daemon a DaemonSet on both nodes, its cache on the
 * node), `helm install peerload charts/peerload` with the values an admin sets, Triton from
 * deploy/examples/triton-hardlink itself, and the ServedModel of deploy/examples/triton with the bucket's endpoint
 * filled in. The origin is MinIO on the machine behind a counting proxy on node 0's address. Then:
 *   - the model Ready on the Triton pods of both nodes, answering an inference; every object read from the origin
 *     once; each pod's files hard links of its node's daemon's cache; `kubectl get` and `describe` as the README
 *     shows them;
 *   - ... (scale, pod deletion, drain, leader election, upgrade, deletion follow).
 */
import { afterAll, beforeAll, describe, expect, inject, it, onTestFailed } from 'vitest';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { dump, load } from 'js-yaml';
import { clusterKubectl, type Cluster, type ClusterInfo } from '../support/cluster.ts';
import {
  clusterReport,
  importClusterImages,
  installDragonfly,
  rolledOut,
  type InstalledDragonfly,
} from '../support/cluster-install.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { CHART, helm } from '../support/helm.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { waitFor } from '../support/process.ts';
import { inferEcho } from '../support/triton-echo.ts';
import { expectCrossings, PREHEATED_ON_BOTH } from '../support/origin-crossings.ts';

const NS = 'models';
const BUCKET = 'models';
const TOKEN = 'cluster-e2e-agent-token-0123456789abcdef';
/** Large enough that each daemon downloads it in pieces (4 MiB each) from another peer. */
const WEIGHTS = Buffer.alloc(12 << 20, 7);
const FILES: Record<string, Buffer> = {
  'triton/echo/1/model.py': Buffer.from(ECHO_MODEL_PY),
  'triton/echo/1/offset.json': Buffer.from(JSON.stringify({ offset: 1 })),
  'triton/echo/1/weights.bin': WEIGHTS,
};
/** The node volume both the daemons and the Triton pods mount (deploy/examples/triton-hardlink). */
const NODE_VOLUME = '/var/lib/dragonfly';

let info: ClusterInfo;
let kubectl: Cluster['kubectl'];
let kubeconfig: string;
let dragonfly: InstalledDragonfly;
let minio: MinIO;
let origin: CountingProxy;
let work: string;

interface Pod {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName: string };
  status: { podIP?: string; conditions?: { type: string; status: string }[] };
}
const ready = (p: Pod) => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

async function tritonPods(): Promise<Pod[]> {
  const list = JSON.parse(
    await kubectl(['get', 'pods', '-n', NS, '-l', 'app.kubernetes.io/name=triton', '-o', 'json']),
  ) as { items: Pod[] };
  return list.items.filter((p) => !p.metadata.deletionTimestamp);
}

interface ServedModelStatus {
  conditions?: { type: string; status: string; reason?: string; message?: string }[];
  replicas?: { pod?: string; state?: string }[];
  readyReplicas?: number;
  desiredReplicas?: number;
}
async function servedModel(): Promise<{ status?: ServedModelStatus }> {
  return JSON.parse(await kubectl(['get', 'servedmodel', 'echo', '-n', NS, '-o', 'json'])) as {
    status?: ServedModelStatus;
  };
}

/** The ServedModel Ready on `n` replicas, every Triton pod Ready. */
async function untilServedOn(n: number, what: string): Promise<Pod[]> {
  return waitFor(
    what,
    async () => {
      const [pods, sm] = [await tritonPods(), await servedModel()];
      const isReady = sm.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      if (!isReady || sm.status?.readyReplicas !== n) return undefined;
      return pods.length === n && pods.every(ready) ? pods : undefined;
    },
    { timeoutMs: 300_000, intervalMs: 2_000 },
  );
}

beforeAll(async () => {
  info = inject('cluster');
  kubectl = clusterKubectl(info);
  kubeconfig = info.kubeconfigPath;
  work = await mkdtemp(join(tmpdir(), 'peerload-cluster-install-'));
  const images = await importClusterImages(info);

  // The origin: MinIO on the machine, reached by the pods through a counting proxy on node 0's address.
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  for (const [key, body] of Object.entries(FILES)) await minio.putObject(BUCKET, key, body);
  origin = await startCountingProxy(minio.endpoint, info.nodes[0]!.ip);

  dragonfly = await installDragonfly(kubectl, images);

  // The install, as docs/operations.md has it: the manager's token in a Secret, then the chart with the values an
  // admin sets for this cluster (its manager, the token, and the S3-compatible store the models come from).
  await kubectl(['create', 'namespace', 'peerload-system']);
  await kubectl([
    'create',
    'secret',
    'generic',
    'dragonfly-token',
    '-n',
    'peerload-system',
    `--from-literal=token=${dragonfly.token}`,
  ]);
  const tag = images.peerload.slice(images.peerload.lastIndexOf(':') + 1);
  helm([
    'install',
    'peerload',
    CHART,
    '--kubeconfig',
    kubeconfig,
    '--namespace',
    'peerload-system',
    '--set',
    `image.tag=${tag}`,
    '--set',
    `manager.url=${dragonfly.inClusterURL}`,
    '--set',
    'manager.apiPath=/oapi/v1',
    '--set',
    'manager.tokenSecret=dragonfly-token',
    '--set-json',
    `allowedStorageHosts=${JSON.stringify([origin.url])}`,
    '--wait',
    '--timeout',
    '5m',
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
  sm.spec.preheat.objectStorage['endpoint'] = origin.url;
  sm.spec.preheat.objectStorage['pathStyle'] = true;
  await kubectl(['apply', '-n', NS, '-f', '-'], { input: JSON.stringify(sm) });
}, 1_800_000);

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
          'peerload-system': 'app.kubernetes.io/name=peerload',
          'dragonfly-system': 'component in (client,seed-client)',
        }),
      );
    });

  it('serves the model on the Triton pods of both nodes, the origin read once, each file a link of its node cache', async () => {
    report();
    const pods = await untilServedOn(2, 'echo Ready on both Triton pods');
    expect(new Set(pods.map((p) => p.spec.nodeName)).size).toBe(2);

    for (const pod of pods) {
      const answer = await inferEcho({ url: `http://${pod.status.podIP}:8000` }, [1, 2]);
      expect(answer).toMatchObject({ model_version: '1', outputs: [{ data: [2, 3] }] });
    }
    // The weights crossed from the origin once (the seed peer's fetch): both nodes' daemons had them from peers.
    // The small files, which never travel between peers, once per peer at most.
    expectCrossings(
      Object.entries(FILES).map(([key, body]) => [key, body.length]),
      (key) => origin.bytesServed(`/${BUCKET}/${key}`),
      PREHEATED_ON_BOTH,
    );

    // Each pod's weights are a hard link of a file in its own node's daemon cache.
    for (const pod of pods) {
      const placed = await stat(join(NODE_VOLUME, 'model-roots', pod.metadata.name, 'echo/1/weights.bin'));
      expect(placed.nlink).toBeGreaterThanOrEqual(2);
      const cached = await inodesUnder(join(NODE_VOLUME, 'nodes', pod.spec.nodeName));
      expect(cached.has(placed.ino)).toBe(true);
    }

    const table = await kubectl(['get', 'servedmodels', '-n', NS]);
    expect(table).toMatch(/^NAME\s+MODEL\s+/);
    expect(table).toMatch(/echo\s+echo\s+.*True/);
    const described = await kubectl(['describe', 'servedmodel', 'echo', '-n', NS]);
    expect(described).toContain('Ready');
    expect(described).not.toMatch(/Warning/);
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
