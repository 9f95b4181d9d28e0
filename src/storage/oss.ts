/**
 * Alibaba Cloud OSS signed GET URLs, signature V1 (query form):
 * `Signature = base64(HMAC-SHA1(AccessKeySecret, "GET\n" + Content-MD5 + "\n" + Content-Type + "\n" + Expires +
 * "\n" + CanonicalizedOSSHeaders + CanonicalizedResource))`, with empty MD5 and type, no OSS headers, and
 * `CanonicalizedResource = /{bucket}/{key}` (the raw key). Query: OSSAccessKeyId, Expires, Signature.
 *
 * Written by hand on node:crypto rather than with `ali-oss`: its `signatureUrl` reads the wall clock
 * (`utility.timestamp()`), so it cannot sign for a given time (the shared vectors need a fixed clock), it refuses
 * IP-address endpoints, and it would bring a large HTTP-client dependency tree for one HMAC. The algorithm is
 * checked against the OSS documentation's signature example in test/unit/storage-vectors.test.ts.
 */
import { createHmac } from 'node:crypto';
import { appendQuery, objectURL, type StorageLocation } from './objecturl.ts';
import type { OSSCredentials } from './credentials.ts';
import type { SignRequest } from './signer.ts';

/** The V1 string to sign of a query-signed GET without headers. */
export function ossStringToSign(bucket: string, key: string, expires: number): string {
  return `GET\n\n\n${expires}\n/${bucket}/${key}`;
}

/** base64(HMAC-SHA1(secret, stringToSign)): the V1 signature (also that of the header form). */
export function ossSignature(accessKeySecret: string, stringToSign: string): string {
  return createHmac('sha1', accessKeySecret).update(stringToSign, 'utf8').digest('base64');
}

/** Signs a GET of `key`: `Expires` is `now` (whole seconds) plus `expiresSeconds`. */
export function signOSS(
  location: StorageLocation,
  key: string,
  credentials: OSSCredentials,
  req: SignRequest,
): string {
  const unsigned = objectURL(location, key);
  const bucket = location.bucket!; // objectURL checked it
  const expires = Math.floor(req.now.getTime() / 1000) + req.expiresSeconds;
  const signature = ossSignature(credentials.accessKeySecret, ossStringToSign(bucket, key, expires));
  return appendQuery(unsigned, [
    ['OSSAccessKeyId', credentials.accessKeyID],
    ['Expires', String(expires)],
    ['Signature', signature],
  ]);
}
