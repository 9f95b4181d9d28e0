/**
 * Object URL layout and default task-id filters per object-storage kind. Pure: no I/O, no clock.
 *
 * These rules are shared with the Java plugin (plugin/), which must produce byte-identical unsigned URLs and the
 * same filters, so that a preheat made by the operator and a download made by the plugin have the same task id.
 * The rules are written out at the top of test/vectors/object-storage.json; both test suites read those vectors.
 *
 * - Key: split on `/`; each segment percent-encoded per RFC 3986 (UTF-8 bytes; unreserved `A-Z a-z 0-9 - . _ ~`
 *   kept, everything else `%XX` uppercase); segments joined with `/` (so empty segments survive).
 * - Endpoint: used as written minus trailing `/`. For the host forms, the scheme (lowercased) and the authority
 *   (`host[:port]`, as written) are taken from it and any path is ignored.
 * - s3:  no endpoint: `https://{bucket}.s3.{region}.amazonaws.com/{key}` (region default `us-east-1`);
 *        endpoint + `pathStyle: true`: `{endpoint}/{bucket}/{key}`;
 *        endpoint without pathStyle: `{scheme}://{bucket}.{authority}/{key}`.
 * - oss: `{scheme}://{bucket}.{authority}/{key}` (endpoint required).
 * - gcs: `https://storage.googleapis.com/{bucket}/{key}`, or `{endpoint}/{bucket}/{key}`.
 * - abs: `https://{accountName}.blob.core.windows.net/{container}/{key}`; with an endpoint whose host starts with
 *        `{accountName}.` (an account endpoint): `{endpoint}/{container}/{key}`; with any other endpoint (Azurite,
 *        an IP address): `{endpoint}/{accountName}/{container}/{key}`.
 */
import type { ObjectStorageLocation, ObjectStorageType } from '../api/objectstorage.ts';

/** The fields of a storage location that decide its URLs and filter (ObjectStorageSource has them too). */
export type StorageLocation = Pick<
  ObjectStorageLocation,
  'type' | 'bucket' | 'container' | 'accountName' | 'region' | 'endpoint' | 'pathStyle' | 'projectID'
> & { filteredQueryParams?: readonly string[] | undefined };

export const DEFAULT_S3_REGION = 'us-east-1';

/**
 * The query parameters each kind's signature adds, left out of the task id when the location gives no
 * `filteredQueryParams`.
 *
 * - s3: the six names of a SigV4 presigned URL (`X-Amz-Algorithm`, `-Credential`, `-Date`, `-Expires`,
 *   `-SignedHeaders`, `-Signature`) plus `X-Amz-Security-Token`, which a session token adds and which changes with
 *   every session, so a download signed with a newer token would otherwise miss the preheated task.
 * - oss: `OSSAccessKeyId` plus `Expires, Signature` (the V1 signature's own), like the peer daemon's own default
 *   filter.
 *   The access key id must go too: left in, it puts the key into the task id, so the preheat (signed with the
 *   operator's Secret) and the plugin's download stop sharing a task id as soon as one side's key is rotated, and
 *   a signed URL never has the task id of the bare object URL.
 * - gcs: the six `X-Goog-*` names of a V4 signed URL.
 * - abs: every SAS parameter name the Azure SDKs (JavaScript and Java) may emit; the account, container and blob
 *   are in the path, so nothing that identifies the content is dropped.
 */
export const DEFAULT_FILTERS: Readonly<Record<ObjectStorageType, readonly string[]>> = {
  s3: [
    'X-Amz-Algorithm',
    'X-Amz-Credential',
    'X-Amz-Date',
    'X-Amz-Expires',
    'X-Amz-SignedHeaders',
    'X-Amz-Signature',
    'X-Amz-Security-Token',
  ],
  oss: ['OSSAccessKeyId', 'Expires', 'Signature'],
  gcs: [
    'X-Goog-Algorithm',
    'X-Goog-Credential',
    'X-Goog-Date',
    'X-Goog-Expires',
    'X-Goog-SignedHeaders',
    'X-Goog-Signature',
  ],
  abs: [
    'sv',
    'ss',
    'srt',
    'spr',
    'st',
    'se',
    'sip',
    'si',
    'ses',
    'sr',
    'sp',
    'sig',
    'sdd',
    'skoid',
    'sktid',
    'skt',
    'ske',
    'sks',
    'skv',
    'saoid',
    'suoid',
    'scid',
    'sduoid',
    'skdutid',
    'srh',
    'srq',
    'rscc',
    'rscd',
    'rsce',
    'rscl',
    'rsct',
  ],
};

/** The default filter of a storage kind (a fresh copy). */
export function defaultFilter(type: ObjectStorageType): string[] {
  return [...DEFAULT_FILTERS[type]];
}

/** The filter the location uses: its `filteredQueryParams` when given (even `[]`), else the kind's default. */
export function effectiveFilter(location: Pick<StorageLocation, 'type' | 'filteredQueryParams'>): string[] {
  return location.filteredQueryParams !== undefined
    ? [...location.filteredQueryParams]
    : defaultFilter(location.type);
}

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/** RFC 3986 percent-encoding of one path segment: UTF-8 bytes, unreserved kept, the rest `%XX` uppercase. */
function encodeSegment(segment: string): string {
  // In a `u` regex a surrogate pair is one code point, so this matches lone surrogates only.
  if (/\p{Surrogate}/u.test(segment))
    throw new Error('object key is not well-formed Unicode (lone surrogate)');
  let out = '';
  for (const byte of Buffer.from(segment, 'utf8')) {
    const ch = String.fromCharCode(byte);
    out += byte < 0x80 && UNRESERVED.test(ch) ? ch : '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

/** An object key as it appears in a URL path: each `/`-separated segment encoded, `/` kept. */
export function encodeKey(key: string): string {
  return key.split('/').map(encodeSegment).join('/');
}

/** A storage endpoint as written (`scheme://authority[/path]`), the one parser of endpoints in src/. */
export interface Endpoint {
  /** The endpoint as written, without trailing slashes. */
  base: string;
  scheme: 'http' | 'https';
  /** `host[:port]` as written. */
  authority: string;
  /** The host without port, lowercased (for comparisons only). */
  host: string;
  /** The port as written (`''` when none). */
  port: string;
  /** The path after the authority, without trailing slashes (`''` when none). */
  path: string;
}

/** Parses an endpoint; throws when it is not an absolute http(s) URL without query, fragment or user info. */
export function parseEndpoint(endpoint: string): Endpoint {
  const m = /^(https?):\/\/([^/?#\s@]+)((?:\/[^?#\s]*)?)$/i.exec(endpoint);
  if (!m) throw new Error(`endpoint must be an absolute http(s) URL without query, fragment or user info`);
  const authority = m[2]!;
  const bracket = authority.startsWith('[') ? authority.indexOf(']') + 1 : 0;
  const colon = authority.indexOf(':', bracket);
  const host = (colon < 0 ? authority : authority.slice(0, colon)).toLowerCase();
  return {
    base: endpoint.replace(/\/+$/, ''),
    scheme: m[1]!.toLowerCase() as 'http' | 'https',
    authority,
    host,
    port: colon < 0 ? '' : authority.slice(colon + 1),
    path: m[3]!.replace(/\/+$/, ''),
  };
}

function required(value: string | undefined, field: string, type: ObjectStorageType): string {
  if (value === undefined || value === '') throw new Error(`${field} is required for ${type}`);
  return value;
}

/**
 * The unsigned URL of an object. Throws when the location lacks a field the kind needs or the key is empty.
 * The signed URL of every kind is this URL plus the signature's query parameters (see sign.ts).
 */
export function objectURL(location: StorageLocation, key: string): string {
  if (key === '') throw new Error('object key must not be empty');
  const path = encodeKey(key);
  const endpoint = location.endpoint !== undefined ? parseEndpoint(location.endpoint) : undefined;
  switch (location.type) {
    case 's3': {
      const bucket = required(location.bucket, 'bucket', 's3');
      if (endpoint === undefined) {
        const region = location.region || DEFAULT_S3_REGION;
        return `https://${bucket}.s3.${region}.amazonaws.com/${path}`;
      }
      if (location.pathStyle === true) return `${endpoint.base}/${bucket}/${path}`;
      return `${endpoint.scheme}://${bucket}.${endpoint.authority}/${path}`;
    }
    case 'oss': {
      const bucket = required(location.bucket, 'bucket', 'oss');
      const ep = endpoint ?? parseEndpoint(required(location.endpoint, 'endpoint', 'oss'));
      return `${ep.scheme}://${bucket}.${ep.authority}/${path}`;
    }
    case 'gcs': {
      const bucket = required(location.bucket, 'bucket', 'gcs');
      return `${endpoint?.base ?? 'https://storage.googleapis.com'}/${bucket}/${path}`;
    }
    case 'abs': {
      const account = required(location.accountName, 'accountName', 'abs');
      const container = required(location.container, 'container', 'abs');
      if (endpoint === undefined) return `https://${account}.blob.core.windows.net/${container}/${path}`;
      if (endpoint.host.startsWith(`${account.toLowerCase()}.`))
        return `${endpoint.base}/${container}/${path}`;
      return `${endpoint.base}/${account}/${container}/${path}`;
    }
    default: {
      const unknown: never = location.type;
      throw new Error(`unknown object storage type ${String(unknown)}`);
    }
  }
}

/** RFC 3986 encoding of a query name or value (like a path segment, so `/`, `=`, `&`, `+` are encoded too). */
function encodeQueryComponent(s: string): string {
  return encodeSegment(s);
}

/** `url` plus query parameters, in the given order, each name and value RFC 3986 encoded. */
export function appendQuery(url: string, params: readonly (readonly [string, string])[]): string {
  if (params.length === 0) return url;
  const query = params.map(([k, v]) => `${encodeQueryComponent(k)}=${encodeQueryComponent(v)}`).join('&');
  return `${url}${url.includes('?') ? '&' : '?'}${query}`;
}

/** The path of an absolute URL string exactly as written (from the first `/` after the authority). */
export function urlPath(url: string): string {
  const authorityStart = url.indexOf('://') + 3;
  const slash = url.indexOf('/', authorityStart);
  if (authorityStart < 3 || slash < 0) return '/';
  const end = url.search(/[?#]/);
  return end > slash ? url.slice(slash, end) : url.slice(slash);
}
