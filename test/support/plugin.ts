/** The endpoint plugin for tests, benchmarks and the demo: its jar, and its configuration file (read as src/check/plugin-config.ts reads it). */
import { execFile } from 'node:child_process';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './kube.ts';
import type { Azurite } from './azurite.ts';
import type { MinIO } from './minio.ts';

/** Builds the plugin jar (JUnit is `npm test`'s job, not repeated here) and returns its path. */
export async function pluginJar(): Promise<string> {
  const { stdout } = await promisify(execFile)('bash', [join(REPO_ROOT, 'scripts/build-plugin.sh')], {
    env: { ...process.env, PEERLOAD_SKIP_PLUGIN_TESTS: '1' },
    maxBuffer: 16 << 20,
    timeout: 900_000,
  });
  return stdout.trim().split('\n').pop()!;
}

/** A plugin configuration for a bucket of a MinIO (path style), downloading through the proxy at `addr`. */
export function minioPluginConfig(
  minio: MinIO,
  bucket: string,
  addr: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    addr,
    header: {},
    object_storage: {
      type: 's3',
      bucket_name: bucket,
      region: minio.region,
      access_key: minio.accessKey,
      secret_key: minio.secretKey,
      endpoint: minio.endpoint,
      path_style: 'true',
    },
    ...extra,
  };
}

/** A plugin configuration for a container of an Azurite, downloading through the proxy at `addr`. */
export function azuritePluginConfig(
  azurite: Azurite,
  container: string,
  addr: string,
): Record<string, unknown> {
  return {
    addr,
    header: {},
    object_storage: {
      type: 'abs',
      account_name: azurite.accountName,
      account_key: azurite.accountKey,
      container_name: container,
      endpoint: azurite.endpoint,
    },
  };
}

/** Writes the configuration then renames it into place, as a Secret volume update does (the plugin re-reads it). */
export async function writePluginConfig(path: string, config: Record<string, unknown>): Promise<void> {
  await writeFile(`${path}.tmp`, JSON.stringify(config, null, 2));
  await rename(`${path}.tmp`, path);
}
