/**
 * A ServedModel that is a directory (spec.files) against the real apiserver (its CEL rules), a real MinIO listing
 * and the manager + peer emulators, served by a fake model-server driver that loads directories: the owned
 * ModelPreheat lists and preheats the same prefix with the same rules; once it succeeded, every replica registers
 * with Registration.files (each file's key and path, the bucket without any credential, the preheat's filter), and
 * the ServedModel's listing digest is the ModelPreheat's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createSecret } from '../support/kube.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { ModelServerDrivers } from '../../src/servers/driver.ts';
import { DirectoryDriver } from '../support/directory-driver.ts';

const BUCKET = 'weights';
const ENDPOINTS = ['http://198.18.7.1:8000', 'http://198.18.7.2:8000'];
const FILES: Record<string, string> = {
  'config.json': '{"model_type":"llama"}',
  'model-00001-of-00002.safetensors': 'a'.repeat(3000),
  'model-00002-of-00002.safetensors': 'b'.repeat(2000),
  'tokenizer/tokenizer.json': '{}',
};

let kc: k8s.KubeConfig;
let resources: PeerloadNamespace;
let ns: string;
let minio: MinIO;
let peer: PeerProxy;
let manager: ManagerEmulator;
let operator: RunningManager;
const driver = new DirectoryDriver(ENDPOINTS);

beforeAll(async () => {
  ({ kc, ns, peerload: resources } = await testNamespace('sm-dir'));
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  for (const [path, body] of Object.entries(FILES)) await minio.putObject(BUCKET, `llm/tiny/${path}`, body);
  await minio.putObject(BUCKET, 'llm/tiny/README.md', 'left out');
  await createSecret(kc, ns, 's3', { access_key: minio.accessKey, secret_key: minio.secretKey });
  peer = await startPeerProxy();
  manager = await startManagerEmulator({ peer });
  operator = await startManager(
    kc,
    [...soloOperatorFlags(), '--manager-url', manager.url, '--allowed-endpoint-hosts', '198.18.0.0/16'],
    [
      modelPreheatController,
      (ctx) => createServedModelController(ctx, { drivers: new ModelServerDrivers([driver]) }),
    ],
  );
}, 180_000);

afterAll(async () => {
  await operator?.stop();
  await Promise.all([manager?.close(), peer?.close()]);
  await minio?.stop();
});

const create = (name: string, spec: Record<string, unknown>) => resources.createServedModel(name, spec);

const objectStorage = () => ({
  ...minio.location(BUCKET),
  credentialsSecretRef: { name: 's3' },
  filteredQueryParams: [
    'X-Amz-Algorithm',
    'X-Amz-Credential',
    'X-Amz-Date',
    'X-Amz-Expires',
    'X-Amz-SignedHeaders',
    'X-Amz-Signature',
  ],
});

describe('a ServedModel that is a directory', () => {
  it('the owned preheat warms the prefix; every replica registers with the files, no credential', async () => {
    await create('tiny', {
      modelName: 'tiny',
      files: { prefix: 'llm/tiny/', exclude: ['*.md'] },
      modelServer: { endpoints: ENDPOINTS, driver: 'directories' },
      preheat: { create: true, scope: 'single_seed_peer', objectStorage: objectStorage() },
    });
    const sm = await resources.untilServedModel(
      'tiny',
      'Ready',
      (o) => conditionOf(o, 'Ready')?.status === 'True',
      {
        timeoutMs: 60_000,
        intervalMs: 200,
      },
    );
    // The replicas registered once the preheat's job was underway; the job ends on its own.
    const preheat = await resources.untilModelPreheat(
      'tiny-preheat',
      'succeeded',
      (o) => o.status?.files?.jobsSucceeded === 1,
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(preheat.spec.objectStorage).toMatchObject({ prefix: 'llm/tiny/', exclude: ['*.md'] });
    expect(preheat.status!.files).toMatchObject({ count: 4, jobsTotal: 1, jobsSucceeded: 1 });
    // Both listed the same content.
    expect(sm!.status!.files).toEqual({
      count: 4,
      bytes: 3000 + 2000 + 22 + 2,
      digest: preheat.status!.files!.digest,
    });

    const paths = Object.keys(FILES).sort();
    for (const server of driver.servers.values()) {
      expect(server.registered).toHaveLength(1);
      const reg = server.registered[0]!;
      expect(reg.fileName).toBe('llm/tiny/');
      expect(reg.files!.files).toEqual(
        paths.map((p) => ({ path: p, key: `llm/tiny/${p}`, size: FILES[p]!.length })),
      );
      expect(reg.files!.storage).toEqual({
        type: 's3',
        bucket: BUCKET,
        endpoint: minio.endpoint,
        pathStyle: true,
        region: minio.region,
        expiresSeconds: 3600,
      });
      expect(reg.files!.filter).toEqual(objectStorage().filteredQueryParams);
      const text = JSON.stringify(reg);
      expect(text).not.toContain(minio.secretKey);
      expect(text).not.toContain('credentialsSecretRef');
    }
  });

  it('the apiserver refuses fileName beside files, and files without preheat.objectStorage', async () => {
    const base = { modelName: 'x', modelServer: { endpoints: ENDPOINTS } };
    await expect(
      create('both', {
        ...base,
        fileName: 'a.mar',
        files: { prefix: 'llm/tiny/' },
        preheat: { create: true, objectStorage: objectStorage() },
      }),
    ).rejects.toThrow(
      /set exactly one of fileName \(an archive\), files \(a directory in a bucket\) and source/,
    );
    await expect(create('nowhere', { ...base, files: { prefix: 'llm/tiny/' } })).rejects.toThrow(
      /files needs preheat.objectStorage/,
    );
  });
});
