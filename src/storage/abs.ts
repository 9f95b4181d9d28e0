/**
 * Azure Blob Storage signed GET URLs: a service SAS (read permission on one blob) made by @azure/storage-blob's
 * generateBlobSASQueryParameters with the account's shared key.
 *
 * The SAS is appended to objectURL(); the service signs the canonical resource `/blob/{account}/{container}/{blob}`
 * (decoded name), which does not depend on how the path is percent-encoded, so the shared URL layout is safe.
 */
import {
  BlobSASPermissions,
  generateBlobSASQueryParameters,
  StorageSharedKeyCredential,
} from '@azure/storage-blob';
import { objectURL, type StorageLocation } from './objecturl.ts';
import type { ABSCredentials } from './credentials.ts';
import type { SignRequest } from './signer.ts';

/**
 * The SAS service version (`sv`), pinned so that a library upgrade does not change the URLs (and the shared
 * vectors) unnoticed; 2025-11-05 is accepted by Azure and by Azurite 3.35+.
 */
export const ABS_SAS_VERSION = '2025-11-05';

/** Signs a read of `key`: a SAS with `sp=r`, `sr=b`, no start time (valid at once), expiring after `expiresSeconds`. */
export function signABS(
  location: StorageLocation,
  key: string,
  credentials: ABSCredentials,
  req: SignRequest,
): string {
  const unsigned = objectURL(location, key);
  const credential = new StorageSharedKeyCredential(location.accountName!, credentials.accountKey);
  const sas = generateBlobSASQueryParameters(
    {
      version: ABS_SAS_VERSION,
      containerName: location.container!,
      blobName: key,
      permissions: BlobSASPermissions.parse('r'),
      expiresOn: new Date(req.now.getTime() + req.expiresSeconds * 1000),
    },
    credential,
  );
  return `${unsigned}?${sas.toString()}`;
}
