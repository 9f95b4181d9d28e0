/**
 * The task tag of a credentialed object: what keeps a private object's task in the P2P network away from anyone
 * without the credentials that read it.
 *
 * The peer daemon's task id leaves the signature out of the URL (it must, or no two downloads would share a task),
 * so without more a bare GET of a private object's URL through a peer that holds its task is served from that
 * peer's cache: the daemon never asks the origin. The id does include the task's tag (`X-Dragonfly-Tag`), so every
 * download that signs with storage credentials carries a tag derived from them, and a request without the tag
 * (or with another) is another task, whose first request goes to the origin and is refused there.
 *
 * The tag is an HMAC-SHA256 keyed by the credentials' secret over the storage kind and the bucket (an Azure
 * container with its account): the same for every holder of the same credentials (the operator's preheat, the
 * plugin and the agent share the tasks), impossible to compute without the secret, and revealing nothing of it
 * (the HMAC is a pseudo-random function of its key). Holders of another secret for the same bucket get other tasks:
 * the secret is what the origin trusts, so it is what may name the task.
 *
 * The key of each kind is the secret that signs its URLs: S3 the secret access key (a session's, with STS: tasks
 * then last one session), OSS the access key secret, GCS the service account's private key as PKCS#8 DER (one key
 * however its PEM is written), Azure the account key's bytes. The rules are shared with the Java plugin through
 * test/vectors/credential-tag.json.
 *
 * The other private sources follow the same rule with their own long-lived secret, so that every holder (the
 * operator's preheat, the agents, `peerload fetch`) derives the same tag and nobody else can:
 *   - a registry (an OCI source with credentials): the key is `username:password` (what a docker config's `auth`
 *     holds), never the short-lived bearer token its token service hands out (every holder gets another one, and
 *     it changes every few minutes), over `oci` and `<registry host[:port]>/<repository>`;
 *   - a Hugging Face Hub (a source with a token): the key is the token, over `huggingface` and
 *     `<endpoint host[:port]>/<repo>`: the git files at the Hub and the LFS files at its CDN alike.
 */
import { createHmac, createPrivateKey } from 'node:crypto';
import type { StorageCredentials } from './credentials.ts';
import type { StorageLocation } from './objecturl.ts';

/** What a credential tag starts with (so a tag in a daemon's log says what it is; never a secret). */
export const CREDENTIAL_TAG_PREFIX = 'peerload-';

/** Domain separation: an HMAC of this key for any other purpose never equals a tag. */
const CONTEXT = 'peerload task tag v1';

/** The bucket the tag is scoped to: the bucket, or `<account>/<container>` for Azure. */
export function tagScope(location: Pick<StorageLocation, 'type' | 'bucket' | 'container' | 'accountName'>) {
  if (location.type !== 'abs') {
    if (!location.bucket) throw new Error(`the ${location.type} location has no bucket`);
    return location.bucket;
  }
  if (!location.accountName || !location.container)
    throw new Error('the abs location has no container or no accountName');
  return `${location.accountName}/${location.container}`;
}

function secretOf(credentials: StorageCredentials): Buffer {
  switch (credentials.type) {
    case 's3':
      return Buffer.from(credentials.secretAccessKey, 'utf8');
    case 'oss':
      return Buffer.from(credentials.accessKeySecret, 'utf8');
    case 'gcs':
      return createPrivateKey(credentials.privateKey).export({ format: 'der', type: 'pkcs8' });
    case 'abs':
      return Buffer.from(credentials.accountKey, 'base64');
  }
}

/** `peerload-` and the first 32 hex digits (128 bits) of the HMAC keyed by `key` over the kind and the scope. */
function secretTag(key: Buffer | string, kind: string, scope: string): string {
  const mac = createHmac('sha256', key).update(`${CONTEXT}\n${kind}\n${scope}`, 'utf8').digest('hex');
  return CREDENTIAL_TAG_PREFIX + mac.slice(0, 32);
}

/** The tag the credentials give objects of `location`'s bucket: `peerload-` and 32 hex digits (128 bits). */
export function credentialTag(
  location: Pick<StorageLocation, 'type' | 'bucket' | 'container' | 'accountName'>,
  credentials: StorageCredentials,
): string {
  if (credentials.type !== location.type)
    throw new Error(`credentials of type ${credentials.type} do not read ${location.type} objects`);
  return secretTag(secretOf(credentials), location.type, tagScope(location));
}

/** `host[:port]` of a URL as WHATWG writes it (lower case, the scheme's default port dropped). */
const hostOf = (url: string) => new URL(url).host;

/**
 * The tag registry credentials give the blobs of `repository` at `registryURL` (`https://host[:port]`, or any URL
 * at the registry: only its host and port count).
 */
export function registryCredentialTag(
  registryURL: string,
  repository: string,
  credentials: { username: string; password: string },
): string {
  const key = Buffer.from(`${credentials.username}:${credentials.password}`, 'utf8');
  return secretTag(key, 'oci', `${hostOf(registryURL)}/${repository}`);
}

/** The tag a Hub token gives the files of `repo` at the Hub `endpointURL` (its CDN's URLs included). */
export function hubTokenTag(endpointURL: string, repo: string, token: string): string {
  return secretTag(Buffer.from(token, 'utf8'), 'huggingface', `${hostOf(endpointURL)}/${repo}`);
}

/**
 * The tag a download sends: the spec's own tag and the credential tag, joined by `/`; either alone when the other is
 * absent (a public object keeps the spec's tag, or none).
 */
export function taskTag(tag: string | undefined, credential: string | undefined): string | undefined {
  if (!credential) return tag || undefined;
  return tag ? `${tag}/${credential}` : credential;
}
