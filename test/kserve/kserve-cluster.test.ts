/**
 * KServe in the real two-node cluster (the kserve-cluster project's global set-up: kubelets, containerd, CoreDNS,
 * kube-proxy, test/support/cluster.ts), with peerload as its storage initializer, as an admin installs them:
 *   - KServe v0.20.0's controller manager as a pod (KServe's own Deployment, RBAC and webhooks; its image built by
 *     scripts/build-cluster-images.sh kserve), its webhooks reached by the apiserver through their Service with the
 *     certificate and caBundle made here (test/support/kserve-cluster.ts: there is no cert-manager);
 *   - Dragonfly as pods, as the install e2e puts it (its daemon a host-network DaemonSet, proxy <node IP>:4001);
 *   - KServe's `default` ClusterStorageContainer disabled and deploy/kserve applied with the store's host added to
 *     the allow-list, as docs/kserve.md says;
 *   - KServe's own Triton ClusterServingRuntime (`kserve-tritonserver`) with the Triton image built here.
 * The origin is MinIO on the machine behind a counting proxy on node 0's address, holding a Triton model
 * repository (the python-backend echo model, 12 MiB of weights beside it). An InferenceService in RawDeployment
 * mode, 2 replicas spread over the two nodes, the storageUri s3:// on it: both pods Ready, each init container
 * peerload's (`peerload fetch` with KServe's two arguments), /mnt/models filled on both nodes with the repository's
 * bytes, an inference answered by each pod, and the weights read from the origin about once.
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createHash, randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFailed } from 'vitest';
import { clusterKubectl, type Cluster, type ClusterInfo } from '../support/cluster.ts';
import {
  clusterReport,
  importClusterImages,
  installDragonfly,
  livePods,
  podReady,
  type ClusterImages,
  type ClusterPod,
} from '../support/cluster-install.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { KSERVE_NAMESPACE } from '../support/kserve-controller.ts';
import { installKServe, type InstalledKServe } from '../support/kserve-cluster.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { expectCrossings, type CrossingBounds } from '../support/origin-crossings.ts';
import { waitFor } from '../support/process.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';

const NS = 'kserve-models';
const BUCKET = 'models';
const PREFIX = 'kserve/triton-repo';
const STORAGE_URI = `s3://${BUCKET}/${PREFIX}`;
/** A Triton model repository: the echo model, version 1 (offset 1), and weights above dfdaemon's piece length. */
const REPOSITORY: Record<string, Buffer> = {
  'echo/config.pbtxt': Buffer.from(ECHO_CONFIG_PBTXT),
  'echo/1/model.py': Buffer.from(ECHO_MODEL_PY),
  'echo/1/offset.json': Buffer.from(JSON.stringify({ offset: 1 })),
  'echo/1/weights.bin': randomBytes((12 << 20) + 4321),
};
/**
 * Two init containers, each through its own node's peer, no preheat: the weights cross once (the first peer's or
 * the seed peer's fetch; the other node's peer takes them from a peer), a file under a piece once per peer that
 * downloads it (the two node peers and the seed peer), plus a 1-byte probe per peer that starts a download.
 */
const TWO_PODS: CrossingBounds = { crossings: 1, smallCrossings: 3, downloads: 3 };

let info: ClusterInfo;
let kubectl: Cluster['kubectl'];
let images: ClusterImages;
let kserve: InstalledKServe;
let minio: MinIO;
let origin: CountingProxy;
let work: string;

type Obj = Record<string, any>;
interface Pod extends ClusterPod {
  spec: ClusterPod['spec'] & { initContainers: Obj[]; containers: Obj[] };
  status: ClusterPod['status'] & { initContainerStatuses?: Obj[] };
}
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const predictorPods = () => livePods<Pod>(kubectl, NS, 'serving.kserve.io/inferenceservice=echo');

beforeAll(async () => {
  info = inject('cluster');
  kubectl = clusterKubectl(info);
  work = await mkdtemp(join(tmpdir(), 'peerload-kserve-cluster-'));
  const t0 = Date.now();
  images = await importClusterImages(info, ['kserve']);
  const lap = (what: string) =>
    console.log(`[kserve-cluster] ${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  lap('images imported');

  // The origin: MinIO on the machine, reached by the pods through a counting proxy on node 0's address.
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  for (const [key, body] of Object.entries(REPOSITORY))
    await minio.putObject(BUCKET, `${PREFIX}/${key}`, body);
  origin = await startCountingProxy(minio.endpoint, info.nodes[0]!.ip);

  await installDragonfly(kubectl, images);
  lap('Dragonfly ready');
  kserve = await installKServe(kubectl, info.kubeconfigPath, images.tagOf('kserve/kserve-controller:'), work);
  lap('the KServe controller ready');

  // KServe's own default ClusterStorageContainer, as its release installs it, then disabled (docs/kserve.md).
  const defaultCsc = load(
    await readFile(join(kserve.dir, 'config/storagecontainers/default.yaml'), 'utf8'),
  ) as Obj;
  defaultCsc.spec.container.image = 'kserve/storage-initializer:v0.20.0';
  await applyWhenWebhooksServe(JSON.stringify(defaultCsc));
  await kubectl([
    'patch',
    'clusterstoragecontainer',
    'default',
    '--type',
    'merge',
    '-p',
    '{"disabled": true}',
  ]);
  // deploy/kserve with the store's host added to the allow-list, in the manifest's flag, as an admin edits it.
  const csc = join(work, 'kserve');
  await cp(join(REPO_ROOT, 'deploy/kserve'), csc, { recursive: true });
  const manifest = join(csc, 'clusterstoragecontainer.yaml');
  const text = await readFile(manifest, 'utf8');
  const edited = text.replace(/(- --allowed-storage-hosts=\S+)/, `$1,${origin.url}`);
  if (edited === text) throw new Error(`no --allowed-storage-hosts flag in ${manifest}`);
  if (!edited.includes(`image: ${images.peerload}\n`))
    throw new Error(`deploy/kserve's image is not the one built here (${images.peerload})`);
  await writeFile(manifest, edited);
  await kubectl(['apply', '-k', csc]);

  // KServe's Triton runtime as its release renders it (the image: the one built here).
  const runtime = load(
    await readFile(join(kserve.dir, 'config/runtimes/kserve-tritonserver.yaml'), 'utf8'),
  ) as Obj;
  runtime.spec.containers[0].image = images.tagOf('nvcr.io/nvidia/tritonserver:');
  await applyWhenWebhooksServe(JSON.stringify(runtime));

  // The namespace's service account and S3 Secret exactly as KServe documents them.
  await kubectl(['create', 'namespace', NS]);
  await kubectl(['apply', '-n', NS, '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: {
            name: 's3creds',
            annotations: {
              'serving.kserve.io/s3-endpoint': origin.url.replace(/^http:\/\//, ''),
              'serving.kserve.io/s3-usehttps': '0',
              'serving.kserve.io/s3-region': minio.region,
            },
          },
          stringData: { AWS_ACCESS_KEY_ID: minio.accessKey, AWS_SECRET_ACCESS_KEY: minio.secretKey },
        },
        {
          apiVersion: 'v1',
          kind: 'ServiceAccount',
          metadata: { name: 's3-reader' },
          secrets: [{ name: 's3creds' }],
        },
      ],
    }),
  });
  lap('KServe configured');
}, 1_800_000);

/**
 * The first objects KServe's validating webhooks see: applied until the apiserver reaches the webhook through its
 * Service (kube-proxy's rules for a new endpoint come a moment after the pod is Ready).
 */
async function applyWhenWebhooksServe(input: string): Promise<void> {
  await waitFor(
    "KServe's webhooks to answer the apiserver",
    () => kubectl(['apply', '-f', '-'], { input }).then(() => true),
    { timeoutMs: 60_000, intervalMs: 1_000 },
  );
}

afterAll(async () => {
  // The cluster goes with the run (its teardown fails on leftovers); what this file put on the machine goes now.
  await kubectl?.(['delete', 'namespace', NS, '--wait=true', '--timeout=120s']).catch(() => {});
  await origin?.close();
  await minio?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('KServe v0.20.0 in a real two-node cluster with peerload as its storage initializer', () => {
  it("runs KServe's controller as a pod of the image built here, its pod mutator reached through its Service", async () => {
    const pod = JSON.parse(
      await kubectl(['get', 'pod', '-n', KSERVE_NAMESPACE, kserve.pod, '-o', 'json']),
    ) as Pod;
    expect(podReady(pod)).toBe(true);
    expect(pod.spec.containers.map((c) => c.image)).toEqual([images.tagOf('kserve/kserve-controller:')]);
    const config = JSON.parse(
      await kubectl([
        'get',
        'mutatingwebhookconfiguration',
        'inferenceservice.serving.kserve.io',
        '-o',
        'json',
      ]),
    ) as { webhooks: { name: string; clientConfig: Obj }[] };
    const mutator = config.webhooks.find(
      (w) => w.name === 'inferenceservice.kserve-webhook-server.pod-mutator',
    );
    expect(mutator?.clientConfig).toMatchObject({
      service: {
        name: 'kserve-webhook-server-service',
        namespace: KSERVE_NAMESPACE,
        path: '/mutate-pods',
        port: 443,
      },
    });
    expect(mutator?.clientConfig.url).toBeUndefined();
  });

  it('serves an s3:// InferenceService on both nodes: peerload fills /mnt/models, Triton answers, the origin read once', async () => {
    onTestFailed(async () => {
      console.log(
        await clusterReport(kubectl, {
          [NS]: 'serving.kserve.io/inferenceservice=echo',
          [KSERVE_NAMESPACE]: 'control-plane=kserve-controller-manager',
          'dragonfly-system': 'component in (client,seed-client)',
        }),
      );
      console.log(await kubectl(['get', 'inferenceservice', '-n', NS, '-o', 'yaml']).catch(String));
    });
    const created = Date.now();
    await kubectl(['apply', '-n', NS, '-f', '-'], {
      input: JSON.stringify({
        apiVersion: 'serving.kserve.io/v1beta1',
        kind: 'InferenceService',
        metadata: {
          name: 'echo',
          annotations: {
            'serving.kserve.io/deploymentMode': 'RawDeployment',
            // Exactly minReplicas pods, no HorizontalPodAutoscaler (there is no metrics server here).
            'serving.kserve.io/autoscalerClass': 'none',
          },
        },
        spec: {
          predictor: {
            serviceAccountName: 's3-reader',
            minReplicas: 2,
            maxReplicas: 2,
            // One replica per node.
            topologySpreadConstraints: [
              {
                maxSkew: 1,
                topologyKey: 'kubernetes.io/hostname',
                whenUnsatisfiable: 'DoNotSchedule',
                labelSelector: { matchLabels: { 'serving.kserve.io/inferenceservice': 'echo' } },
              },
            ],
            model: {
              modelFormat: { name: 'triton' },
              runtime: 'kserve-tritonserver',
              storageUri: STORAGE_URI,
              // The runtime asks for a whole core and 2Gi per replica; the two nodes share two cores.
              resources: {
                requests: { cpu: '100m', memory: '256Mi' },
                limits: { cpu: '1', memory: '1Gi' },
              },
            },
          },
        },
      }),
    });
    const pods = await waitFor(
      'both predictor pods Ready',
      async () => {
        const p = await predictorPods();
        return p.length === 2 && p.every(podReady) ? p : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 1_000 },
    );
    console.log(
      `[kserve-cluster] both pods Ready ${((Date.now() - created) / 1000).toFixed(1)} s after the create`,
    );
    await kubectl(['wait', '-n', NS, 'inferenceservice/echo', '--for=condition=Ready', '--timeout=120s']);
    expect(new Set(pods.map((p) => p.spec.nodeName))).toEqual(new Set(info.nodes.map((n) => n.name)));

    for (const pod of pods) {
      const name = pod.metadata.name;
      // The init container is peerload's, from deploy/kserve, with KServe's two arguments.
      expect(pod.spec.initContainers.map((c) => c.name)).toEqual(['storage-initializer']);
      const init = pod.spec.initContainers[0]!;
      expect(init.image).toBe(images.peerload);
      expect(init.command.slice(0, 3)).toEqual(['peerload', 'fetch', '--kserve']);
      expect(init.command).toContain('--proxy=http://$(NODE_IP):4001');
      expect(init.command.find((a: string) => a.startsWith('--allowed-storage-hosts='))).toContain(
        origin.url,
      );
      expect(init.args).toEqual([STORAGE_URI, '/mnt/models']);
      const state = pod.status.initContainerStatuses?.[0]?.state?.terminated;
      expect(state, name).toMatchObject({ exitCode: 0, reason: 'Completed' });
      const log = await kubectl(['logs', '-n', NS, name, '-c', 'storage-initializer']);
      expect(log, name).toContain(`4 files, ${total()} bytes into /mnt/models`);
      expect(log, name).toContain('4 of 4 on their expected tasks');
      const seconds = (Date.parse(state.finishedAt) - Date.parse(state.startedAt)) / 1000;
      console.log(
        `[kserve-cluster] ${name} on ${pod.spec.nodeName}: init ${seconds} s: ${log.trim().split('\n').pop()}`,
      );

      // /mnt/models as Triton's container sees it: every file of the repository, byte for byte.
      const listed = await kubectl([
        'exec',
        '-n',
        NS,
        name,
        '-c',
        'kserve-container',
        '--',
        'sh',
        '-c',
        'cd /mnt/models && find . -type f -exec stat -c "%n %s" {} + && find . -type f -exec sha256sum {} +',
      ]);
      for (const [key, body] of Object.entries(REPOSITORY)) {
        expect(listed, `${name}: ${key}`).toContain(`./${key} ${body.length}\n`);
        expect(listed, `${name}: ${key}`).toContain(`${sha256(body)}  ./${key}\n`);
      }
      expect(listed.trim().split('\n')).toHaveLength(2 * Object.keys(REPOSITORY).length);

      // Triton serves the model from it: version 1, offset 1.
      const server = { url: `http://${pod.status.podIP}:8080` };
      expect(await servedVersions(server, 'echo')).toEqual(['1']);
      expect(await inferEcho(server, [1, 2])).toMatchObject({
        model_version: '1',
        outputs: [{ data: [2, 3] }],
      });
    }

    const bytes = expectCrossings(
      Object.entries(REPOSITORY).map(([key, body]) => [`${PREFIX}/${key}`, body.length]),
      (key) => origin.bytesServed(`/${BUCKET}/${key}`),
      TWO_PODS,
    );
    console.log(
      `[kserve-cluster] origin body bytes per file for 2 pods: ${Object.entries(REPOSITORY)
        .map(([key, body], i) => `${key} ${bytes[i]} of ${body.length}`)
        .join(', ')}`,
    );
  });
});

const total = () => Object.values(REPOSITORY).reduce((n, b) => n + b.length, 0);
