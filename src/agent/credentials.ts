/**
 * The storage credentials the agent signs object keys with: a mounted Secret (one file per key, the keys of
 * CREDENTIAL_KEYS), read again for every version so that a rotated Secret is used without a restart.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ObjectStorageType } from '../api/objectstorage.ts';
import { credentialsFromSecretData, type StorageCredentials } from '../storage/credentials.ts';
import { rememberSecret } from '../redact.ts';

/** The credentials of `type` from the Secret volume at `dir`. Throws CredentialsError naming the missing key. */
export function credentialsDir(dir: string): (type: ObjectStorageType) => Promise<StorageCredentials> {
  return async (type) => {
    const data: Record<string, string> = {};
    // A Secret volume also holds `..data` and timestamped directories (the kubelet's atomic swap): skip dot names.
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (e.name.startsWith('.') || e.isDirectory()) continue;
      const value = await readFile(join(dir, e.name), 'utf8');
      rememberSecret(value);
      data[e.name] = value;
    }
    return credentialsFromSecretData(type, data, { encoding: 'utf8', secretName: dir });
  };
}
