/**
 * Azurite (npm `azurite`, Microsoft's Azure Storage emulator), blob service only, as a child process on a free
 * loopback port with a temporary workspace. It verifies shared-key SAS signatures (a tampered `sig` gets 403), so
 * it proves the abs signer. Default development account `devstoreaccount1` with its published well-known key.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { BlobServiceClient, StorageSharedKeyCredential } from '@azure/storage-blob';
import type { ABSCredentials } from '../../src/storage/credentials.ts';
import type { StorageLocation } from '../../src/storage/objecturl.ts';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

/** Azurite's default account and its documented development key (public; not a secret). */
export const AZURITE_ACCOUNT = 'devstoreaccount1';
export const AZURITE_ACCOUNT_KEY =
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export interface Azurite {
  /** Blob endpoint without the account, e.g. `http://127.0.0.1:41234` (the `endpoint` of an abs location). */
  endpoint: string;
  accountName: string;
  accountKey: string;
  /** Service client authorised with the account key. */
  client: BlobServiceClient;
  createContainer(name: string): Promise<void>;
  putBlob(container: string, name: string, body: string | Buffer): Promise<void>;
  /** The abs location of `container` on this server, as the operator and the plugin sign for it. */
  location(container: string): StorageLocation & { type: 'abs' };
  /** The account key as abs credentials. */
  credentials(): ABSCredentials;
  process: ManagedProcess;
  stop(): Promise<void>;
}

function azuriteBlobMain(): string {
  const require = createRequire(import.meta.url);
  const pkgPath = require.resolve('azurite/package.json');
  const pkg = require(pkgPath) as { bin: Record<string, string> };
  return join(dirname(pkgPath), pkg.bin['azurite-blob']!);
}

export async function startAzurite(): Promise<Azurite> {
  const dir = await mkdtemp(join(tmpdir(), 'peerload-azurite-'));
  const port = await freePort();
  const proc = startProcess(
    'azurite-blob',
    process.execPath,
    [
      azuriteBlobMain(),
      '--blobHost',
      '127.0.0.1',
      '--blobPort',
      String(port),
      '--location',
      dir,
      '--skipApiVersionCheck',
      '--loose',
      '--disableTelemetry',
      '--silent',
    ],
    join(dir, 'azurite.log'),
  );
  const endpoint = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await proc.stop(5_000);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    // Any HTTP answer means the server is up (an unauthenticated list gets 403).
    await waitFor('azurite to listen', async () => {
      if (proc.child.exitCode !== null)
        throw new Error(`azurite exited (${proc.child.exitCode}); see ${proc.logPath}`);
      const res = await fetch(`${endpoint}/${AZURITE_ACCOUNT}?comp=list`);
      await res.arrayBuffer();
      return res.status > 0;
    });
  } catch (err) {
    await stop();
    throw err;
  }
  const client = new BlobServiceClient(
    `${endpoint}/${AZURITE_ACCOUNT}`,
    new StorageSharedKeyCredential(AZURITE_ACCOUNT, AZURITE_ACCOUNT_KEY),
  );
  return {
    endpoint,
    accountName: AZURITE_ACCOUNT,
    accountKey: AZURITE_ACCOUNT_KEY,
    client,
    process: proc,
    location: (container) => ({ type: 'abs', accountName: AZURITE_ACCOUNT, container, endpoint }),
    credentials: () => ({ type: 'abs', accountKey: AZURITE_ACCOUNT_KEY }),
    async createContainer(name) {
      await client.getContainerClient(name).createIfNotExists();
    },
    async putBlob(container, name, body) {
      const data = typeof body === 'string' ? Buffer.from(body) : body;
      await client.getContainerClient(container).getBlockBlobClient(name).upload(data, data.length);
    },
    stop,
  };
}
