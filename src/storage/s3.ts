/**
 * S3 (and S3-compatible) presigned GET URLs: SigV4 query signing by the AWS SDK's S3RequestPresigner.
 *
 * The request handed to the presigner is built from objectURL() rather than from a GetObjectCommand, so that
 * the signed URL is exactly the shared unsigned URL plus signature parameters: the command path adds `x-id=GetObject`
 * and hoists `X-Amz-Content-Sha256=UNSIGNED-PAYLOAD` into the query, and its endpoint rules pick path or host style
 * by themselves (dotted bucket names, IP endpoints). Neither extra parameter is in the default s3 filter, so either
 * would give the operator's URL another task id than the Java plugin's. Here the payload hash header is kept as an
 * unsigned, unhoisted header: the canonical request still says UNSIGNED-PAYLOAD (what S3 assumes for query
 * authentication) and the query carries only X-Amz-Algorithm, -Credential, -Date, -Expires, -SignedHeaders
 * (`host`), -Signature, and -Security-Token with a session token — AWS's documented presigned-URL form.
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { S3RequestPresigner } from '@aws-sdk/s3-request-presigner';
import { appendQuery, DEFAULT_S3_REGION, objectURL, urlPath, type StorageLocation } from './objecturl.ts';
import type { S3Credentials } from './credentials.ts';
import type { SignRequest } from './signer.ts';

/** SigV4 caps presigned URLs at 7 days. */
const S3_MAX_EXPIRES_SECONDS = 604_800;

const PAYLOAD_HASH_HEADER = 'x-amz-content-sha256';

type SourceData = string | ArrayBuffer | ArrayBufferView;

/**
 * SHA-256 / HMAC-SHA256 on node:crypto in the SDK's `Hash` shape (what @smithy/hash-node does; that package is
 * not a direct dependency, and ten lines are simpler than depending on a transitive one).
 */
class NodeSha256 {
  private readonly h: Hash | Hmac;
  constructor(secret?: SourceData) {
    this.h = secret === undefined ? createHash('sha256') : createHmac('sha256', toBuffer(secret));
  }
  update(data: SourceData): void {
    this.h.update(toBuffer(data));
  }
  digest(): Promise<Uint8Array> {
    return Promise.resolve(new Uint8Array(this.h.digest()));
  }
}

function toBuffer(data: SourceData): Buffer {
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.from(data);
}

type PresignInput = Parameters<S3RequestPresigner['presign']>[0];

/** Presigns a GET of `key`. Deterministic for a given `now`. */
export async function signS3(
  location: StorageLocation,
  key: string,
  credentials: S3Credentials,
  req: SignRequest,
): Promise<string> {
  if (req.expiresSeconds > S3_MAX_EXPIRES_SECONDS) {
    throw new Error(`s3 presigned URLs expire after at most ${S3_MAX_EXPIRES_SECONDS} s`);
  }
  const unsigned = objectURL(location, key);
  const url = new URL(unsigned);
  const presigner = new S3RequestPresigner({
    credentials: {
      accessKeyId: credentials.accessKeyID,
      secretAccessKey: credentials.secretAccessKey,
      ...(credentials.sessionToken !== undefined ? { sessionToken: credentials.sessionToken } : {}),
    },
    region: location.region || DEFAULT_S3_REGION,
    sha256: NodeSha256,
  });
  // The path is taken from the unsigned URL string itself (already RFC 3986 encoded); S3 signs it as it is sent.
  const path = urlPath(unsigned);
  const request: PresignInput = {
    protocol: url.protocol,
    hostname: url.hostname,
    ...(url.port !== '' ? { port: Number(url.port) } : {}),
    method: 'GET',
    path,
    query: {},
    headers: { host: url.host, [PAYLOAD_HASH_HEADER]: 'UNSIGNED-PAYLOAD' },
  };
  const signed = await presigner.presign(request, {
    signingDate: req.now,
    expiresIn: req.expiresSeconds,
    unsignableHeaders: new Set([PAYLOAD_HASH_HEADER]),
    unhoistableHeaders: new Set([PAYLOAD_HASH_HEADER]),
  });
  const params: [string, string][] = [];
  for (const [name, value] of Object.entries(signed.query ?? {})) {
    if (typeof value === 'string') params.push([name, value]);
    else if (Array.isArray(value)) for (const v of value) params.push([name, v]);
  }
  return appendQuery(unsigned, params);
}
