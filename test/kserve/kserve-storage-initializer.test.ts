/**
 * The opt-in KServe suite (`npm run test:kserve`): the real KServe controller v0.20.0 and its pod-mutating webhook
 * (built from the Go module proxy, test/support/kserve-controller.ts) against the real apiserver, with deploy/kserve's
 * ClusterStorageContainer, then the init container it produces run on the real Dragonfly network with MinIO.
 *
 * An InferenceService in RawDeployment mode with an s3:// storageUri: KServe's controller makes the predictor
 * Deployment; a pod is created from its template as the ReplicaSet controller would (there is no
 * kube-controller-manager here), through the apiserver, so KServe's webhook mutates it. Its init container is
 * peerload's, with KServe's two arguments and the credentials KServe took from the service account's Secret. That
 * container's command, arguments and environment are then run as a process for two pods on two node peers (the
 * downward API's status.hostIP is the peer's address; the proxy port, 4001 in a cluster, is the test peer's own):
 * both fill /mnt/models with the model, and MinIO serves the weights once.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { startDragonfly, type Dragonfly } from '../support/dragonfly.ts';
import { GVR, gvr, startKServeController, type KServeController } from '../support/kserve-controller.ts';
import { kubeConfig, REPO_ROOT } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { waitFor } from '../support/process.ts';
import { kustomize } from '../support/runtime-deploy.ts';

const run = promisify(execFile);
const kubeconfigPath = inject('kubeconfigPath');
const NS = 'kserve-e2e';
const BUCKET = 'kserve-models';
const WEIGHTS = randomBytes((5 << 20) + 777);
const CONFIG = Buffer.from('{"framework":"sklearn"}');
const SECRET = gvr('', 'v1', 'secrets', 'Secret');
const SA = gvr('', 'v1', 'serviceaccounts', 'ServiceAccount');
const POD = gvr('', 'v1', 'pods', 'Pod');
const DEPLOYMENT = gvr('apps', 'v1', 'deployments', 'Deployment');

type Any = KubeObject & Record<string, any>;

let kube: KubeClient;
let controller: KServeController;
let network: Dragonfly;
let minio: MinIO;
let origin: CountingProxy;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kserve-suite-'));
  kube = new KubeClient(kubeConfig(kubeconfigPath));
  const started = Date.now();
  controller = await startKServeController(kube, kubeconfigPath, dir);
  console.log(`[kserve] controller ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  network = await startDragonfly({ nodePeers: 2 });
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  await minio.putObject(BUCKET, 'models/iris/model.joblib', WEIGHTS);
  await minio.putObject(BUCKET, 'models/iris/config.json', CONFIG);
  origin = await startCountingProxy(minio.endpoint);

  // deploy/kserve as an admin applies it, MinIO's loopback host added to the storage allow-list.
  const [csc] = kustomize(join(REPO_ROOT, 'deploy/kserve')) as Any[];
  const command = csc!.spec.container.command as string[];
  csc!.spec.container.command = command.map((a) =>
    a.startsWith('--allowed-storage-hosts=') ? `${a},http://127.0.0.1` : a,
  );
  await kube.resource(GVR.storageContainer).create(csc!);
  await kube.resource(GVR.namespace).create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  const endpoint = origin.url.replace(/^http:\/\//, '');
  // A service account's S3 Secret exactly as KServe documents it: keys, and the endpoint in annotations.
  await kube.resource(SECRET).create({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: 's3creds',
      namespace: NS,
      annotations: {
        'serving.kserve.io/s3-endpoint': endpoint,
        'serving.kserve.io/s3-usehttps': '0',
        'serving.kserve.io/s3-region': minio.region,
      },
    },
    stringData: { AWS_ACCESS_KEY_ID: minio.accessKey, AWS_SECRET_ACCESS_KEY: minio.secretKey },
  } as Any);
  await kube.resource(SA).create({
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: 's3-reader', namespace: NS },
    secrets: [{ name: 's3creds' }],
  } as Any);
  await kube.resource(GVR.servingRuntime).create({
    apiVersion: 'serving.kserve.io/v1alpha1',
    kind: 'ServingRuntime',
    metadata: { name: 'sklearn', namespace: NS },
    spec: {
      supportedModelFormats: [{ name: 'sklearn', version: '1', autoSelect: true }],
      containers: [
        {
          name: 'kserve-container',
          image: 'kserve/sklearnserver:v0.20.0',
          args: ['--model_name={{.Name}}', '--model_dir=/mnt/models'],
        },
      ],
    },
  } as Any);
}, 3_600_000);

afterAll(async () => {
  await origin?.close();
  await minio?.stop();
  await network?.stop();
  await controller?.stop();
  await kube
    ?.resource(GVR.storageContainer)
    .delete(undefined, 'peerload')
    .catch(() => undefined);
  await kube?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** A pod as the ReplicaSet controller makes it from the Deployment's template (through the apiserver's admission). */
async function podOf(deployment: Any, n: number): Promise<Any> {
  const t = deployment.spec.template;
  return (await kube.resource(POD).create({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `${deployment.metadata.name}-${n}`,
      namespace: NS,
      labels: t.metadata.labels,
      annotations: t.metadata.annotations,
    },
    spec: t.spec,
  } as Any)) as Any;
}

/** The value of each env var of `container` as the kubelet would give it on node peer `i`. */
async function resolveEnv(container: Any, i: number): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.secretKeyRef) {
      const s = (await kube.resource(SECRET).get(NS, e.valueFrom.secretKeyRef.name)) as Any;
      env[e.name] = Buffer.from(s.data[e.valueFrom.secretKeyRef.key], 'base64').toString('utf8');
    } else if (e.valueFrom?.fieldRef?.fieldPath === 'status.hostIP') env[e.name] = network.peers[i]!.ip;
    else throw new Error(`env ${e.name}: a source this harness does not resolve`);
  }
  return env;
}

describe('KServe v0.20.0 with peerload as its storage initializer', () => {
  it('an s3:// InferenceService gets peerload as init container, which fills /mnt/models on two nodes, MinIO read once', async () => {
    await kube.resource(GVR.isvc).create({
      apiVersion: 'serving.kserve.io/v1beta1',
      kind: 'InferenceService',
      metadata: {
        name: 'iris',
        namespace: NS,
        annotations: { 'serving.kserve.io/deploymentMode': 'RawDeployment' },
      },
      spec: {
        predictor: {
          serviceAccountName: 's3-reader',
          model: { modelFormat: { name: 'sklearn' }, storageUri: `s3://${BUCKET}/models/iris` },
        },
      },
    } as Any);
    const deployment = await waitFor(
      'the predictor Deployment',
      () =>
        kube
          .resource(DEPLOYMENT)
          .get(NS, 'iris-predictor')
          .catch(() => undefined) as Promise<Any | undefined>,
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    const pods = [await podOf(deployment, 0), await podOf(deployment, 1)];
    for (const pod of pods) {
      const init = pod.spec.initContainers?.[0];
      expect(init?.name).toBe('storage-initializer');
      expect(init.image).toBe('ghcr.io/peerload/peerload:0.1.0');
      expect(init.command.slice(0, 3)).toEqual(['peerload', 'fetch', '--kserve']);
      expect(init.args).toEqual([`s3://${BUCKET}/models/iris`, '/mnt/models']);
      const names = (init.env as { name: string }[]).map((e) => e.name);
      for (const n of [
        'AWS_ACCESS_KEY_ID',
        'AWS_SECRET_ACCESS_KEY',
        'S3_ENDPOINT',
        'S3_USE_HTTPS',
        'AWS_ENDPOINT_URL',
        'NODE_IP',
      ])
        expect(names).toContain(n);
      expect(init.volumeMounts.map((m: { mountPath: string }) => m.mountPath)).toContain('/mnt/models');
    }
    console.log(
      `[kserve] init container: ${JSON.stringify({ command: pods[0]!.spec.initContainers[0].command, args: pods[0]!.spec.initContainers[0].args })}`,
    );

    for (const [i, pod] of pods.entries()) {
      const init = pod.spec.initContainers[0];
      const env = await resolveEnv(init, i);
      const port = new URL(network.peers[i]!.proxyURL).port;
      const argv = [...init.command.slice(1), ...init.args].map((a: string) =>
        a
          .replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, v: string) => env[v] ?? '')
          .replace(/:4001$/, `:${port}`),
      );
      const dest = join(dir, `pod-${i}`, 'mnt', 'models');
      await mkdir(dest, { recursive: true });
      argv[argv.length - 1] = dest;
      const started = Date.now();
      const { stdout } = await run(
        process.execPath,
        [join(REPO_ROOT, 'bin/peerload.js'), ...argv, '--min-free-bytes=0'],
        {
          env: { PATH: process.env.PATH, ...env },
        },
      );
      console.log(`[kserve] pod ${i} (${((Date.now() - started) / 1000).toFixed(1)} s): ${stdout.trim()}`);
      expect(stdout).toContain('2 of 2 on their expected tasks');
      expect((await readdir(dest)).sort()).toEqual(['config.json', 'model.joblib']);
      expect(await readFile(join(dest, 'model.joblib'))).toEqual(WEIGHTS);
    }
    const served = origin.requests
      .filter(
        (r) =>
          r.method === 'GET' &&
          r.url.split('?')[0] === `/${BUCKET}/models/iris/model.joblib` &&
          r.range !== 'bytes=0-0',
      )
      .reduce((s, r) => s + r.bytes, 0);
    console.log(`[kserve] model.joblib (${WEIGHTS.length} bytes): MinIO body ${served} bytes for 2 pods`);
    expect(served).toBe(WEIGHTS.length);
  });
});
