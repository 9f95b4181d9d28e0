/**
 * Turns a ModelPreheat spec into the manager's preheat request, and says which P2P task id each URL will
 * have, so that `status.tasks` can be matched with peer logs and with the plugin's downloads.
 */
import { base64SecretCredentials } from '../../oci/credentials.ts';
import { parseDuration, type ModelPreheatSpec, type ObjectStorageSource } from '../../api/index.ts';
import type { PreheatJobRequest } from '../../manager/types.ts';
import { credentialsFromSecretData, type StorageCredentials } from '../../storage/credentials.ts';
import { credentialTag, registryCredentialTag, taskTag } from '../../storage/credential-tag.ts';
import { signObjectURL } from '../../storage/sign.ts';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  DEFAULT_TASK_ID_RULE,
  taskID,
  taskIdRule,
  type TaskIdRule,
} from '../../storage/taskid.ts';
import type { SecretReader } from '../secrets.ts';
import { redactURL } from '../../redact.ts';

export interface PreheatPlan {
  request: PreheatJobRequest;
  /**
   * Per URL, as shown in status: never a signed URL (it is a bearer credential while it is valid). The task id is
   * the one the peer daemons compute (spec.peerDaemonVersion, else `defaultRule`), not the manager's.
   */
  tasks: { url: string; taskID: string }[];
}

/** The preheat's storage credentials, from its Secret (CredentialsError or SecretNotFoundError naming it). */
export async function storageCredentials(
  os: ObjectStorageSource,
  namespace: string,
  secrets: SecretReader,
  signal?: AbortSignal,
): Promise<StorageCredentials> {
  const data = os.credentialsSecretRef
    ? await secrets.data(namespace, os.credentialsSecretRef.name, signal)
    : {};
  return credentialsFromSecretData(os.type, data, {
    secretName: os.credentialsSecretRef
      ? `${namespace}/${os.credentialsSecretRef.name}`
      : '(no credentialsSecretRef)',
  });
}

/** The task identity of a spec's downloads: the peer daemons' rule (spec.peerDaemonVersion, else `defaultRule`). */
export function ruleOf(spec: ModelPreheatSpec, defaultRule: TaskIdRule = DEFAULT_TASK_ID_RULE): TaskIdRule {
  // The schema's pattern admits only versions taskIdRule reads.
  return spec.peerDaemonVersion !== undefined ? taskIdRule(spec.peerDaemonVersion)! : defaultRule;
}

/** What one preheat request needs besides its URLs. */
export interface PlanContext {
  bio: string;
  now?: Date | undefined;
  rule?: TaskIdRule | undefined;
}

/**
 * The tag of an object-storage preheat's tasks: the spec's own with the credentials' (storage/credential-tag.ts),
 * so that only holders of the credentials can name the tasks of what they read.
 */
export function objectStorageTag(
  spec: ModelPreheatSpec,
  credentials: StorageCredentials,
): string | undefined {
  return taskTag(spec.tag, credentialTag(spec.objectStorage!, credentials));
}

/** The job request for `keys` of spec.objectStorage, each signed with `credentials`, and each key's task id. */
export async function planObjects(
  spec: ModelPreheatSpec,
  keys: readonly string[],
  credentials: StorageCredentials,
  c: PlanContext,
): Promise<PreheatPlan> {
  const os = spec.objectStorage!;
  const expiresSeconds = Math.round(parseDuration(os.signedURLExpiry) / 1000);
  const now = c.now ?? new Date();
  const signed = await Promise.all(
    keys.map((key) => signObjectURL(os, key, credentials, { now, expiresSeconds })),
  );
  // An empty filter is not sent, and then the manager applies its default list: compute ids the same way.
  const filter = signed[0]!.filter.length > 0 ? signed[0]!.filter : DEFAULT_FILTERED_QUERY_PARAMS;
  const tag = objectStorageTag(spec, credentials);
  const idOf = identityOf(spec, c.rule ?? DEFAULT_TASK_ID_RULE, tag);
  return {
    request: {
      ...commonRequest(spec, c.bio),
      tag,
      type: 'file',
      urls: signed.map((s) => s.url),
      filteredQueryParams: signed[0]!.filter,
    },
    tasks: signed.map((s) => ({ url: s.objectURL, taskID: idOf(s.url, filter) })),
  };
}

function commonRequest(spec: ModelPreheatSpec, bio: string): PreheatJobRequest {
  return {
    type: spec.type,
    headers: spec.headers,
    tag: spec.tag,
    application: spec.application,
    platform: spec.platform,
    scope: spec.scope,
    ips: spec.targets?.ips,
    count: spec.targets?.count,
    percentage: spec.targets?.percentage,
    pieceLength: spec.pieceLength,
    timeoutMs: spec.timeout ? parseDuration(spec.timeout) : undefined,
    schedulerClusterIDs: spec.schedulerClusterIDs,
    bio,
  };
}

const identityOf =
  (spec: ModelPreheatSpec, rule: TaskIdRule, tag: string | undefined = spec.tag) =>
  (url: string, filter: readonly string[]): string =>
    taskID({
      url,
      filter,
      tag,
      application: spec.application,
      pieceLength: spec.pieceLength,
      rule,
    });

/**
 * The tag of an image preheat's blob tasks: the spec's own with the registry credentials' (the manifest URL names
 * the registry and the repository, as the blob URLs the manager derives from it do), none for an anonymous pull.
 */
export function imageTag(
  spec: ModelPreheatSpec,
  credentials: { username?: string | undefined; password?: string | undefined },
): string | undefined {
  const repository = /^[^:]+:\/\/[^/]+\/v2\/(.+)\/manifests\/[^/]+$/.exec(spec.url ?? '')?.[1];
  if (credentials.username === undefined || credentials.password === undefined || repository === undefined)
    return spec.tag;
  const { username, password } = credentials;
  return taskTag(spec.tag, registryCredentialTag(spec.url!, repository, { username, password }));
}

export async function planPreheat(
  spec: ModelPreheatSpec,
  namespace: string,
  secrets: SecretReader,
  identity: { bio: string },
  now: Date = new Date(),
  signal?: AbortSignal,
  defaultRule: TaskIdRule = DEFAULT_TASK_ID_RULE,
): Promise<PreheatPlan> {
  const rule = ruleOf(spec, defaultRule);
  const common = commonRequest(spec, identity.bio);
  const idOf = identityOf(spec, rule);

  if (spec.objectStorage) {
    // A directory (objectStorage.prefix) is listed and planned job by job (directory.ts), never here.
    const keys = spec.objectStorage.keys ?? [];
    if (keys.length === 0)
      throw new Error('planPreheat: objectStorage without keys (a directory) is planned per job');
    const credentials = await storageCredentials(spec.objectStorage, namespace, secrets, signal);
    return planObjects(spec, keys, credentials, { bio: identity.bio, now, rule });
  }

  if (spec.type === 'image') {
    let credentials: { username?: string; password?: string } = {};
    if (spec.imageCredentialsSecretRef) {
      const name = spec.imageCredentialsSecretRef.name;
      const data = await secrets.data(namespace, name, signal);
      // A kubernetes.io/dockerconfigjson Secret (an owned preheat of a ServedModel's OCI source) gives its entry for
      // the registry; any other Secret its username and password keys.
      credentials =
        data['.dockerconfigjson'] !== undefined
          ? (base64SecretCredentials(data, new URL(spec.url!).host) ?? {})
          : {
              username: await secrets.value(namespace, { name, key: 'username' }, signal),
              password: await secrets.value(namespace, { name, key: 'password' }, signal),
            };
    }
    // The blobs, and so the task ids, are known only once the manager has read the manifest. The manager gives
    // every blob task the job's tag, so the credentials' tag names the blobs as the agents name them.
    return {
      request: {
        ...common,
        tag: imageTag(spec, credentials),
        url: spec.url,
        filteredQueryParams: spec.filteredQueryParams,
        ...credentials,
      },
      tasks: [],
    };
  }

  const urls = spec.urls ?? [spec.url!];
  // Without a filter the manager applies its own default; the task ids must be computed the same way.
  const filter = spec.filteredQueryParams?.length ? spec.filteredQueryParams : DEFAULT_FILTERED_QUERY_PARAMS;
  return {
    request: {
      ...common,
      ...(spec.urls ? { urls: spec.urls } : { url: spec.url }),
      filteredQueryParams: spec.filteredQueryParams,
    },
    tasks: urls.map((url) => ({ url: redactURL(url), taskID: idOf(url, filter) })),
  };
}
