/**
 * Google Cloud Storage signed GET URLs: V4 signing (GOOG4-RSA-SHA256) by @google-cloud/storage's getSignedUrl with
 * the service account's private key. Signing is local (the library signs with node:crypto when the credentials
 * carry a private key); nothing is sent over the network. Checked against Google's V4 conformance vectors in
 * test/unit/storage-vectors.test.ts.
 *
 * Note: the library refuses an expiry that is already past by the wall clock, so signing for a `now` far in the
 * past fails (tests that use an old fixed clock fake `Date`).
 */
import { Storage } from '@google-cloud/storage';
import { objectURL, type StorageLocation } from './objecturl.ts';
import type { GCSCredentials } from './credentials.ts';
import type { SignRequest } from './signer.ts';

/** V4 signed URLs are valid for at most 7 days. */
const GCS_MAX_EXPIRES_SECONDS = 604_800;

/** Signs a GET of `key` (path style, `host` the only signed header). */
export async function signGCS(
  location: StorageLocation,
  key: string,
  credentials: GCSCredentials,
  req: SignRequest,
): Promise<string> {
  if (req.expiresSeconds > GCS_MAX_EXPIRES_SECONDS) {
    throw new Error(`gcs signed URLs expire after at most ${GCS_MAX_EXPIRES_SECONDS} s`);
  }
  const unsigned = objectURL(location, key);
  let host: string | undefined;
  if (location.endpoint !== undefined) {
    const ep = new URL(location.endpoint);
    if (ep.pathname.replace(/\/+$/, '') !== '') throw new Error('gcs endpoint must not have a path');
    host = ep.origin;
  }
  const storage = new Storage({
    ...((location.projectID ?? credentials.projectID)
      ? { projectId: location.projectID ?? credentials.projectID }
      : {}),
    credentials: { client_email: credentials.clientEmail, private_key: credentials.privateKey },
  });
  const [url] = await storage
    .bucket(location.bucket!)
    .file(key)
    .getSignedUrl({
      version: 'v4',
      action: 'read',
      accessibleAt: req.now,
      expires: req.now.getTime() + req.expiresSeconds * 1000,
      ...(host !== undefined ? { host } : {}),
    });
  // The library encodes the path like objectURL() (RFC 3986 per segment); a future change there must not slip by.
  const query = url.indexOf('?');
  if (query < 0 || url.slice(0, query) !== unsigned) {
    throw new Error('the gcs library produced a URL whose path differs from the object URL');
  }
  return url;
}
