/**
 * The query parameters each kind's signer adds, and how their values vary: a signature parameter a side does not
 * filter makes that side's task id change with every signing, which the check finds by reasoning, not by comparing
 * two random signatures.
 */
import type { ObjectStorageType } from '../api/index.ts';
import { ABS_SAS_VERSION } from '../storage/abs.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS } from '../storage/taskid.ts';

/**
 * How a signature parameter's value varies: `signing` with every signing (time, signature), `session` with every
 * session token, `credential` with the access key, `expiry` with the URL's validity, `constant` never.
 */
export type Variation = 'signing' | 'session' | 'credential' | 'expiry' | 'constant';
interface SignatureParam {
  name: string;
  varies: Variation;
  value?: string;
}

/** The query parameters each kind's signer adds (src/storage/{s3,oss,gcs,abs}.ts and the Java plugin's). */
export const SIGNATURE_PARAMS: Readonly<Record<ObjectStorageType, readonly SignatureParam[]>> = {
  s3: [
    { name: 'X-Amz-Algorithm', varies: 'constant', value: 'AWS4-HMAC-SHA256' },
    { name: 'X-Amz-Credential', varies: 'signing' }, // access key / date / region / s3 / aws4_request
    { name: 'X-Amz-Date', varies: 'signing' },
    { name: 'X-Amz-Expires', varies: 'expiry' },
    { name: 'X-Amz-SignedHeaders', varies: 'constant', value: 'host' },
    { name: 'X-Amz-Signature', varies: 'signing' },
    { name: 'X-Amz-Security-Token', varies: 'session' }, // only with a session token
  ],
  oss: [
    { name: 'OSSAccessKeyId', varies: 'credential' },
    { name: 'Expires', varies: 'signing' }, // an absolute time
    { name: 'Signature', varies: 'signing' },
  ],
  gcs: [
    { name: 'X-Goog-Algorithm', varies: 'constant', value: 'GOOG4-RSA-SHA256' },
    { name: 'X-Goog-Credential', varies: 'signing' },
    { name: 'X-Goog-Date', varies: 'signing' },
    { name: 'X-Goog-Expires', varies: 'expiry' },
    { name: 'X-Goog-SignedHeaders', varies: 'constant', value: 'host' },
    { name: 'X-Goog-Signature', varies: 'signing' },
  ],
  abs: [
    { name: 'sv', varies: 'constant', value: ABS_SAS_VERSION },
    { name: 'se', varies: 'signing' }, // an absolute time
    { name: 'sr', varies: 'constant', value: 'b' },
    { name: 'sp', varies: 'constant', value: 'r' },
    { name: 'sig', varies: 'signing' },
  ],
};

export const ALL_SIGNATURE_NAMES = new Set(
  Object.values(SIGNATURE_PARAMS).flatMap((ps) => ps.map((p) => p.name)),
);

/** A preheat URL with the values of signature parameters replaced: a signed URL is a bearer credential. */
export function redact(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  let changed = false;
  for (const name of [...u.searchParams.keys()]) {
    if (ALL_SIGNATURE_NAMES.has(name) || DEFAULT_FILTERED_QUERY_PARAMS.includes(name)) {
      u.searchParams.set(name, 'REDACTED');
      changed = true;
    }
  }
  return changed ? u.href : url;
}

/** A preheat URL as a label: without its signature and filtered parameters (the rest kept as written). */
export function withoutSignature(url: string, filter: readonly string[]): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const kept = url
    .slice(q + 1)
    .replace(/#.*$/, '')
    .split('&')
    .filter((segment) => {
      const name = new URLSearchParams('?' + segment).keys().next().value;
      return name === undefined || !(ALL_SIGNATURE_NAMES.has(name) || filter.includes(name));
    });
  return kept.length > 0 ? `${url.slice(0, q)}?${kept.join('&')}` : url.slice(0, q);
}
