/**
 * Signed GET URLs of objects, per storage kind. Every signed URL is objectURL(location, key) plus the kind's
 * signature query parameters, so canonicalURL(signed, filter) == canonicalURL(unsigned, filter) whenever the filter
 * holds the signature parameter names (effectiveFilter() does by default): a preheat and a later download signed
 * at another time, or by the Java plugin, share one task id.
 */
import type { ObjectStorageType } from '../api/objectstorage.ts';
import { effectiveFilter, objectURL, type StorageLocation } from './objecturl.ts';
import { CredentialsError, type StorageCredentials } from './credentials.ts';
import { signOSS } from './oss.ts';
import type { SignRequest } from './signer.ts';

export interface SignOptions {
  /** Signing time; default: the current time. */
  now?: Date;
  /** Validity of the URL in seconds (positive integer). */
  expiresSeconds: number;
}

export interface SignedObjectURL {
  /** The signed URL to download from. */
  url: string;
  /** The same URL without the signature parameters. */
  objectURL: string;
  /** Query parameter names to leave out of the task id (the location's, else the kind's default). */
  filter: string[];
  /** When the signature stops being accepted. */
  expiresAt: Date;
}

/** Signs a GET of `key` in `location` with `credentials` (of the same kind). */
export async function signObjectURL(
  location: StorageLocation,
  key: string,
  credentials: StorageCredentials,
  opts: SignOptions,
): Promise<SignedObjectURL> {
  if (credentials.type !== location.type) {
    throw new CredentialsError(`credentials of type ${credentials.type} cannot sign ${location.type} URLs`);
  }
  if (!Number.isInteger(opts.expiresSeconds) || opts.expiresSeconds <= 0) {
    throw new Error('expiresSeconds must be a positive integer');
  }
  const now = opts.now ?? new Date();
  if (Number.isNaN(now.getTime())) throw new Error('now is not a valid date');
  // Whole seconds: every kind's signature carries seconds, and this keeps `expiresAt` exact.
  const req: SignRequest = {
    now: new Date(Math.floor(now.getTime() / 1000) * 1000),
    expiresSeconds: opts.expiresSeconds,
  };
  const unsigned = objectURL(location, key);
  let url: string;
  switch (credentials.type) {
    case 's3':
      // The vendor SDKs are loaded on first use: together they cost the operator ~100 MiB it rarely needs.
      url = await (await import('./s3.ts')).signS3(location, key, credentials, req);
      break;
    case 'oss':
      url = signOSS(location, key, credentials, req);
      break;
    case 'gcs':
      url = await (await import('./gcs.ts')).signGCS(location, key, credentials, req);
      break;
    case 'abs':
      url = (await import('./abs.ts')).signABS(location, key, credentials, req);
      break;
    default: {
      const unknown: never = credentials;
      throw new Error(`unknown credentials type ${String((unknown as { type: ObjectStorageType }).type)}`);
    }
  }
  // The invariant the task identity rests on; a library changing its URL layout must not slip through.
  if (!url.startsWith(`${unsigned}?`)) {
    throw new Error(`the ${location.type} signer produced a URL that does not extend the object URL`);
  }
  return {
    url,
    objectURL: unsigned,
    filter: effectiveFilter(location),
    expiresAt: new Date(req.now.getTime() + req.expiresSeconds * 1000),
  };
}
