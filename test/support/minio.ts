/**
 * MinIO, an S3-compatible server that verifies SigV4 (presigned URLs included), built from the Go module proxy by
 * scripts/setup-minio.sh. Started on a free loopback port with a temporary data directory and root credentials;
 * buckets and objects are created through the S3 API (@aws-sdk/client-s3), so no `mc` is needed.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import type { S3Credentials } from '../../src/storage/credentials.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import { freePort } from './ports.ts';
import { setUpTool, startProcess, waitFor, type ManagedProcess } from './process.ts';

export interface MinIO {
  /** `http://127.0.0.1:<port>`: the `endpoint` of an s3 location (use `pathStyle: true`). */
  endpoint: string;
  region: string;
  accessKey: string;
  secretKey: string;
  /** S3 client with the root credentials (path style). */
  client: S3Client;
  createBucket(name: string): Promise<void>;
  putObject(bucket: string, key: string, body: string | Buffer): Promise<void>;
  /** The s3 location of `bucket` on this server, as the operator and the plugin sign for it (path-style). */
  location(bucket: string): StorageLocation & { type: 's3' };
  /** The root user's keys as s3 credentials. */
  credentials(): S3Credentials;
  /** The server's data directory (a deleted object waits in `.minio.sys/tmp/.trash` until MinIO purges it). */
  dataDir: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

/** The MinIO bin directory: $PEERLOAD_MINIO_BIN, else what scripts/setup-minio.sh prints (building it once). */
export const minioBinDir = () => setUpTool('setup-minio.sh', 'PEERLOAD_MINIO_BIN');

export async function startMinIO(
  opts: { accessKey?: string; secretKey?: string; region?: string } = {},
): Promise<MinIO> {
  const bin = join(await minioBinDir(), 'minio');
  const dir = await mkdtemp(join(tmpdir(), 'peerload-minio-'));
  const port = await freePort();
  const accessKey = opts.accessKey ?? 'peerload-root';
  const secretKey = opts.secretKey ?? 'peerload-root-secret';
  const region = opts.region ?? 'us-east-1';
  const proc = startProcess(
    'minio',
    bin,
    ['server', join(dir, 'data'), '--address', `127.0.0.1:${port}`, '--quiet'],
    join(dir, 'minio.log'),
    {
      env: {
        PATH: process.env['PATH'] ?? '/usr/bin:/bin',
        HOME: dir,
        MINIO_ROOT_USER: accessKey,
        MINIO_ROOT_PASSWORD: secretKey,
        MINIO_REGION: region,
        MINIO_BROWSER: 'off',
        MINIO_UPDATE: 'off',
      },
    },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await proc.stop(5_000);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      'minio to be ready',
      async () => {
        if (proc.child.exitCode !== null)
          throw new Error(`minio exited (${proc.child.exitCode}); see ${proc.logPath}`);
        const res = await fetch(`${endpoint}/minio/health/ready`);
        await res.arrayBuffer();
        return res.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  } catch (err) {
    await stop();
    throw err;
  }
  const client = new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
  });
  return {
    dataDir: join(dir, 'data'),
    endpoint,
    region,
    accessKey,
    secretKey,
    client,
    process: proc,
    location: (bucket) => ({ type: 's3', bucket, endpoint, pathStyle: true, region }),
    credentials: () => ({ type: 's3', accessKeyID: accessKey, secretAccessKey: secretKey }),
    async createBucket(name) {
      await client.send(new CreateBucketCommand({ Bucket: name }));
    },
    async putObject(bucket, key, body) {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    },
    async stop() {
      client.destroy();
      await stop();
    },
  };
}
