/**
 * Where a namespaced spec may have the operator (and the agent) send object-storage credentials and registry
 * credentials: the admin's `--allowed-storage-hosts` and `--allowed-registry-hosts`, in the rule syntax of reach.ts.
 * Pure: the controllers ask before they read the Secret, so a refused host never receives a key, a signature or a
 * signed URL (not even through the P2P manager's seed peers, which fetch what the job names).
 *
 * What a location sends where: every signed URL goes to the object URL's host (objecturl.ts); a listing goes to the
 * endpoint (path style) or to the bucket's host under it (virtual-hosted style). Both must be allowed. Without an
 * endpoint the operator builds the provider's own host from the bucket, region or account, which the defaults admit.
 *
 * Why these defaults and not `*.amazonaws.com` or `*.aliyuncs.com`: those domains also hold hosts anyone can rent
 * (EC2's public names, load balancers, API Gateway, Function Compute), and OSS V1 and Azure SAS signatures do not
 * bind the host, so such a host would receive signatures valid against the real store. The defaults name the
 * storage services' hosts only.
 */
import type { ModelPreheatSpec, ObjectStorageLocation } from '../api/index.ts';
import { objectURL, parseEndpoint } from '../storage/objecturl.ts';
import {
  hostAllowed,
  listed,
  parseHostRules,
  ReachReason,
  refusalText,
  type HostRule,
  type CredentialReach,
  type Reach,
} from './reach.ts';

/**
 * The storage services' own hosts: S3 (global, regional and dual-stack endpoints, each path style and virtual
 * hosted; legacy `s3-<region>`), GCS's XML API, Azure Blob Storage accounts, Alibaba OSS regions.
 */
export const DEFAULT_STORAGE_HOSTS = [
  's3.amazonaws.com',
  '*.s3.amazonaws.com',
  's3.*.amazonaws.com',
  '*.s3.*.amazonaws.com',
  's3.dualstack.*.amazonaws.com',
  '*.s3.dualstack.*.amazonaws.com',
  's3-*.amazonaws.com',
  '*.s3-*.amazonaws.com',
  'storage.googleapis.com',
  '*.blob.core.windows.net',
  'oss-*.aliyuncs.com',
  '*.oss-*.aliyuncs.com',
].join(',');

export interface CredentialHostPolicy {
  storageHosts: readonly HostRule[];
  registryHosts: readonly HostRule[];
}

const ALLOWED: CredentialReach = { allowed: true };

type Location = Pick<
  ObjectStorageLocation,
  'type' | 'bucket' | 'container' | 'accountName' | 'region' | 'endpoint' | 'pathStyle' | 'projectID'
>;

/** The URLs a location's credentials go to: a signed object URL's, and the endpoint a listing calls. */
export function storageURLs(location: Location): string[] {
  const object = objectURL(location, 'k');
  if (location.endpoint === undefined) return [object];
  const endpoint = parseEndpoint(location.endpoint);
  const base = `${endpoint.scheme}://${endpoint.authority}/`;
  return object.startsWith(base) ? [object] : [object, base];
}

/**
 * Azure: an account's host is `<account>.blob.core.windows.net`, and any other account's host is also in the
 * default list. A SAS signs the account in the path, not the host, so it must go to its own account's host only.
 */
function foreignAzureAccount(location: Location): string | undefined {
  if (location.type !== 'abs' || location.endpoint === undefined) return undefined;
  const host = parseEndpoint(location.endpoint).host;
  if (!host.endsWith('.blob.core.windows.net')) return undefined;
  return host === `${location.accountName?.toLowerCase()}.blob.core.windows.net` ? undefined : host;
}

/** The host of a URL for a message; a URL that does not parse (`bucket.127.0.0.1`) as written. */
const hostOf = (url: string) => {
  try {
    return new URL(url).host;
  } catch {
    return url.replace(/^[a-z]+:\/\//i, '').split('/')[0]!;
  }
};

/** An object-storage location: every host its credentials would reach must be in `storageHosts`. */
export function storageReach(
  location: Location,
  field: string,
  policy: Pick<CredentialHostPolicy, 'storageHosts'>,
  owner = "the operator's",
): Reach {
  let urls: string[];
  try {
    urls = storageURLs(location);
  } catch {
    urls = [location.endpoint ?? ''];
  }
  const refused = urls.filter((u) => !hostAllowed(u, policy.storageHosts));
  const foreign = foreignAzureAccount(location);
  if (refused.length === 0 && foreign === undefined) return ALLOWED;
  const unlisted = [
    ...new Set(
      refused.filter((u) => !hostAllowed(u.replace(/^http:/i, 'https:'), policy.storageHosts)).map(hostOf),
    ),
  ];
  const why =
    unlisted.length > 0
      ? `host ${unlisted.join(', ')} is not in ${owner} --allowed-storage-hosts ${listed(policy.storageHosts)}`
      : refused.length > 0
        ? refusalText(refused[0]!, policy.storageHosts, '--allowed-storage-hosts', owner)
        : `host ${foreign} is another storage account's than accountName ${location.accountName}`;
  return {
    allowed: false,
    reason: ReachReason.StorageEndpointNotAllowed,
    message:
      `${field}.endpoint: ${why}, so no key, signature or signed URL is sent there (the credentials are not read); ` +
      "remove the endpoint to use the provider's own host, or ask an admin to allow the host",
  };
}

/** An image preheat's registry: with credentials, its host must be in `registryHosts`; without, any host. */
export function registryReach(
  url: string | undefined,
  withCredentials: boolean,
  field: string,
  policy: Pick<CredentialHostPolicy, 'registryHosts'>,
  secretField = 'spec.imageCredentialsSecretRef',
): CredentialReach {
  if (!withCredentials || url === undefined || hostAllowed(url, policy.registryHosts)) return ALLOWED;
  const plain = !hostAllowed(url.replace(/^http:/i, 'https:'), policy.registryHosts) ? undefined : url;
  const why = plain
    ? refusalText(plain, policy.registryHosts, '--allowed-registry-hosts')
    : `registry ${hostOf(url)} is not in the operator's --allowed-registry-hosts ${listed(policy.registryHosts)}`;
  return {
    allowed: false,
    reason: ReachReason.RegistryNotAllowed,
    message:
      `${field}: ${why}, ` +
      `so the credentials of ${secretField} are not read nor sent; ask an admin to allow the registry, ` +
      `or remove ${secretField.split('.').at(-1)} for a public image`,
  };
}

/** Parses the default storage list (for the flag's default and the agent's). */
export function defaultStorageHosts(): HostRule[] {
  return parseHostRules(DEFAULT_STORAGE_HOSTS);
}

/** The admin's lists as the operator's flags hold them. */
export interface CredentialHostConfig {
  allowedStorageHosts: readonly HostRule[];
  allowedRegistryHosts: readonly HostRule[];
}

/** A ModelPreheat spec: its objectStorage's hosts, and an image's registry when it has credentials. */
export function preheatCredentialReach(
  spec: Pick<ModelPreheatSpec, 'objectStorage' | 'type' | 'url' | 'imageCredentialsSecretRef'>,
  config: CredentialHostConfig,
): Reach {
  if (spec.objectStorage)
    return storageReach(spec.objectStorage, 'spec.objectStorage', {
      storageHosts: config.allowedStorageHosts,
    });
  if (spec.type === 'image')
    return registryReach(spec.url, spec.imageCredentialsSecretRef !== undefined, 'spec.url', {
      registryHosts: config.allowedRegistryHosts,
    });
  return ALLOWED;
}
