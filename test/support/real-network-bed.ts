/**
 * What the real-network e2e tests of a ServedModel's preheat start before their operator, beside the run's shared
 * Dragonfly network (shared-dragonfly.ts): MinIO with one bucket behind a counting proxy (the origin, whose bytes the
 * tests count: this file's alone), a work directory, the namespace's Secrets (storage credentials, the manager's
 * user) and the spec fragments that name them. The origin's own port makes its URLs, so its task ids, the file's own.
 */
import * as k8s from '@kubernetes/client-node';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { startCountingProxy, type CountingProxy } from './counting-proxy.ts';
import { ROOT_USER, type DragonflyView } from './dragonfly.ts';
import { startMinIO, type MinIO } from './minio.ts';
import { buildLargeModelArchive, buildModelArchive } from './model-archive.ts';

export interface RealNetworkBed {
  network: DragonflyView;
  minio: MinIO;
  origin: CountingProxy;
  work: string;
  /** The bucket as the replicas and the preheats reach it: through the counting proxy (MinIO signs its Host). */
  location: ReturnType<MinIO['location']>;
  /** The tag the storage credentials give tasks: the plugin's downloads and the owned preheats carry it. */
  tag: string;
  /** Builds a model archive of `size` bytes at least, puts it at every key; its size in bytes. */
  putArchive(modelName: string, size: number, keys: string[]): Promise<number>;
  /**
   * `key` signed a minute earlier than the preheat signs it (another date and signature): only the filter makes
   * their task ids equal.
   */
  signedEarlier(key: string): Promise<string>;
  /** The Secrets `s3-credentials` and `manager-user` in `namespace`. */
  createSecrets(kc: k8s.KubeConfig, namespace: string): Promise<void>;
  /** `preheat.objectStorage` naming the Secret `s3-credentials`, through the counting proxy. */
  objectStorage(): Record<string, unknown>;
  /** `preheat.manager`: the real manager, signed in with the Secret `manager-user`. */
  manager(): Record<string, unknown>;
  stop(): Promise<void>;
}

export async function startRealNetworkBed(o: {
  prefix: string;
  bucket: string;
  /** The network the bed's origin serves: the run's shared one (`sharedDragonfly`), not stopped with the bed. */
  network: DragonflyView;
}): Promise<RealNetworkBed> {
  const work = await mkdtemp(join(tmpdir(), `peerload-${o.prefix}-`));
  const parts: { minio?: MinIO; origin?: CountingProxy } = {};
  const stop = async () => {
    await Promise.allSettled([parts.origin?.close(), parts.minio?.stop()]);
    await rm(work, { recursive: true, force: true });
  };
  try {
    // The caller awaits `network.preheatable` once its own servers are up.
    const network = o.network;
    const minio = (parts.minio = await startMinIO());
    await minio.createBucket(o.bucket);
    const origin = (parts.origin = await startCountingProxy(minio.endpoint));
    const location = { ...minio.location(o.bucket), endpoint: origin.url };
    return {
      network,
      minio,
      origin,
      work,
      location,
      tag: credentialTag(location, minio.credentials()),
      async putArchive(modelName, size, keys) {
        const base = await buildModelArchive(work, { modelName: `${modelName}-base` });
        const bytes = await readFile((await buildLargeModelArchive(base, work, modelName, size)).path);
        for (const key of keys) await minio.putObject(o.bucket, key, bytes);
        return bytes.length;
      },
      async signedEarlier(key) {
        const signed = await signObjectURL(location, key, minio.credentials(), {
          now: new Date(Date.now() - 60_000),
          expiresSeconds: 3600,
        });
        return signed.url;
      },
      async createSecrets(kc, namespace) {
        const core = kc.makeApiClient(k8s.CoreV1Api);
        const secrets: Record<string, Record<string, string>> = {
          's3-credentials': { access_key: minio.accessKey, secret_key: minio.secretKey },
          'manager-user': { username: ROOT_USER.name, password: ROOT_USER.password },
        };
        for (const [name, stringData] of Object.entries(secrets))
          await core.createNamespacedSecret({ namespace, body: { metadata: { name }, stringData } });
      },
      objectStorage: () => ({
        type: 's3',
        bucket: o.bucket,
        endpoint: origin.url,
        pathStyle: true,
        region: minio.region,
        credentialsSecretRef: { name: 's3-credentials' },
      }),
      manager: () => ({ url: network.managerURL, signInSecretRef: { name: 'manager-user' } }),
      stop,
    };
  } catch (err) {
    // A start that fails stops what it started.
    await stop();
    throw err;
  }
}
