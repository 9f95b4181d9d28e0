/**
 * The TorchServe side of deploy/examples/torchserve, end to end: a REAL TorchServe 0.12.0 with the plugin and
 * token authorization ON, `peerload publish-keys` as a separate process under the example's Role (that one
 * Secret), and the operator registering and scaling the model with nothing but the published keys. Then the
 * TorchServe container restarts (same pod, new keys in the same key_file.json): the publisher publishes the new
 * keys and the operator registers the model again with them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { GVR } from '../../src/api/index.ts';
import { KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { loopbackDispatcher, ServiceEndpoints } from '../support/endpointslices.ts';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildModelArchive } from '../support/model-archive.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { gvrOf, kustomize } from '../support/runtime-deploy.ts';
import { serviceAccountIdentity, writeServiceAccountKubeconfig } from '../support/service-account.ts';
import { startTorchServe, type TorchServe, type TorchServeOptions } from '../support/torchserve.ts';

const BUCKET = 'models';
const KEY = 'serving/tiny.mar';
const POD = 'torchserve-0';
const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const admin = new KubeClient(kc);
let ns: string;
let work: string;
let tsDir: string;
let minio: MinIO;
let peer: PeerProxy;
let ts: TorchServe;
let tsOptions: TorchServeOptions;
let publisher: ChildProcess;
let publisherLog = '';
let operator: RunningManager;
let svc: ServiceEndpoints;

type Secret = KubeObject & { data?: Record<string, string> };
const published = async () => {
  const s = await admin.resource<Secret>(GVR.secrets).get(ns, 'torchserve-keys');
  const v = s.data?.[`${POD}.json`];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString('utf8');
};
const servedModel = async () =>
  (await admin.resource(GVR.servedModels).get(ns, 'tiny')) as unknown as ServedModel;
const describeModel = async (auth: Record<string, string>) => {
  const res = await fetch(`${ts.managementURL}/models/tiny`, {
    headers: auth,
    signal: AbortSignal.timeout(10_000),
  });
  return {
    status: res.status,
    body: (await res.json()) as { minWorkers?: number; workers?: { status: string }[] }[],
  };
};
async function readyOnTorchServe(what: string): Promise<void> {
  await waitFor(
    what,
    async () => {
      const sm = await servedModel();
      const ready =
        sm.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' &&
        sm.status.ready === '1/1';
      if (!ready) return false;
      const d = await describeModel(ts.managementAuth());
      return d.status === 200 && d.body[0]!.workers!.some((w) => w.status === 'READY');
    },
    { timeoutMs: 300_000, intervalMs: 1_000 },
  ).catch(async (err) => {
    throw new Error(
      `${(err as Error).message}: ${JSON.stringify((await servedModel()).status)}\n${publisherLog.slice(-2000)}`,
    );
  });
}

beforeAll(async () => {
  ns = await createNamespace(kc, 'ts-keys');
  work = await mkdtemp(join(tmpdir(), 'peerload-ts-keys-'));
  const jar = await pluginJar();
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  const archive = await buildModelArchive(work, { modelName: 'tiny' });
  await minio.putObject(BUCKET, KEY, await readFile(archive.path));
  peer = await startPeerProxy();
  const config = join(work, 'p2p-endpoint.json');
  await writePluginConfig(config, minioPluginConfig(minio, BUCKET, peer.url));

  // The pod's working directory, shared with the publisher as the example's emptyDir `run` is.
  tsDir = join(work, POD);
  await mkdir(tsDir);
  tsOptions = {
    pluginJars: [jar],
    env: { P2P_ENDPOINT_CONFIG: config },
    workDir: tsDir,
    config: { enable_model_api: 'true' },
  };
  ts = await startTorchServe(tsOptions);

  // The example's ServiceAccount, Role and (empty) Secret; the publisher runs as that ServiceAccount.
  const example = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve'));
  for (const m of example.filter(
    (m) =>
      ['ServiceAccount', 'Role', 'RoleBinding'].includes(m.kind) || m.metadata.name === 'torchserve-keys',
  )) {
    await admin.resource(gvrOf(m)).patch(
      ns,
      m.metadata.name,
      { ...m, metadata: { ...m.metadata, namespace: ns } },
      {
        type: 'apply',
        fieldManager: 'peerload-tests',
        force: true,
      },
    );
  }
  const saKubeconfig = join(work, 'torchserve-sa.kubeconfig');
  writeServiceAccountKubeconfig(saKubeconfig, await serviceAccountIdentity(kubeconfigPath, ns, 'torchserve'));
  publisher = spawn(
    process.execPath,
    [
      join(REPO_ROOT, 'bin/peerload.js'),
      'publish-keys',
      '--secret=torchserve-keys',
      `--key-file=${join(tsDir, 'key_file.json')}`,
      `--kubeconfig=${saKubeconfig}`,
      '--poll-interval=1s',
    ],
    { env: { ...process.env, POD_NAME: POD, POD_NAMESPACE: ns }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  publisher.stdout!.on('data', (b: Buffer) => (publisherLog += b.toString()));
  publisher.stderr!.on('data', (b: Buffer) => (publisherLog += b.toString()));

  svc = new ServiceEndpoints(kc, ns, 'torchserve');
  await svc.add(POD, ts.managementURL);
  const dispatcher = loopbackDispatcher();
  operator = await startManager(
    kc,
    ['--no-leader-elect', '--poll-backoff-start', '200ms', '--poll-backoff-max', '2s'],
    [(ctx) => createServedModelController(ctx, { dispatcher })],
  );
}, 900_000);

afterAll(async () => {
  await operator?.stop();
  if (publisher && publisher.exitCode === null) {
    const exited = new Promise((r) => publisher.once('exit', r));
    publisher.kill('SIGTERM');
    await exited;
  }
  await Promise.allSettled([ts?.stop(), peer?.close(), minio?.stop()]);
  await admin.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('TorchServe with token authorization and the key publisher', () => {
  it('registers and scales the model through the published keys', async () => {
    const keyFile = await readFile(join(tsDir, 'key_file.json'), 'utf8');
    await waitFor('the keys published', async () => (await published()) === keyFile, { timeoutMs: 30_000 });
    // Token authorization is on: without the key, TorchServe refuses.
    expect((await describeModel({})).status).toBe(400);

    await admin.resource(GVR.servedModels).create({
      apiVersion: 'peerload.io/v1alpha1',
      kind: 'ServedModel',
      metadata: { name: 'tiny', namespace: ns },
      spec: {
        modelName: 'tiny',
        fileName: KEY,
        modelServer: {
          service: { name: 'torchserve' },
          managementTokenSecretRef: { name: 'torchserve-keys', key: '{pod}.json' },
        },
        workers: { min: 1 },
      },
    } as KubeObject);
    await readyOnTorchServe('tiny Ready 1/1 on TorchServe');
    expect((await describeModel(ts.managementAuth())).body[0]!.minWorkers).toBe(1);
    expect(peer.requests.filter((r) => r.method === 'GET')).toHaveLength(1); // the plugin's download
  });

  it('recovers a TorchServe restart: new keys published, the model registered again with them', async () => {
    const oldKeys = ts.keys;
    const before = await published();
    // The container restarts in place: not ready while down, same addresses and working directory after.
    await svc.setReady(POD, false);
    await ts.stop();
    const addresses = {
      inference_address: ts.inferenceURL,
      management_address: ts.managementURL,
      metrics_address: ts.metricsURL,
    };
    ts = await startTorchServe({ ...tsOptions, config: { ...tsOptions.config, ...addresses } });
    expect(ts.keys.management).not.toBe(oldKeys.management);
    expect((await describeModel(ts.managementAuth())).status).toBe(404); // a fresh TorchServe: no model

    const keyFile = await readFile(join(tsDir, 'key_file.json'), 'utf8');
    await waitFor('the new keys published', async () => (await published()) === keyFile, {
      timeoutMs: 30_000,
    });
    expect(keyFile).not.toBe(before);
    await svc.setReady(POD, true);
    await readyOnTorchServe('tiny Ready 1/1 again after the restart');
    // The old management key no longer works: the operator used the published new one.
    expect((await describeModel({ authorization: `Bearer ${oldKeys.management}` })).status).toBe(400);
    expect(publisherLog).toContain('published rotated keys');
    expect(publisherLog).not.toContain(ts.keys.management);
    expect(publisherLog).not.toContain(oldKeys.api);
  });
});
