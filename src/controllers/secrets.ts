/**
 * Reads Secrets the resources refer to. Direct GETs, not a cluster-wide Secret watch: the operator needs a
 * handful of Secrets only when it acts (creates a job, renews a token), and caching every Secret of the cluster
 * in memory would cost RAM and a broad `watch secrets` permission.
 */
import { ApiError } from '../runtime/kube.ts';
import { GVR, type KubeClient, type KubeObject } from '../runtime/index.ts';
import { rememberSecret } from '../redact.ts';

/** A Secret, or one of its keys, is missing. The message names both; it never carries a value. */
export class SecretNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SecretNotFoundError';
  }
}

type SecretObject = KubeObject & { data?: Record<string, string> };

export class SecretReader {
  private readonly kube: KubeClient;
  constructor(kube: KubeClient) {
    this.kube = kube;
  }

  /** The Secret's data map, values still base64 as the API returns them. */
  async data(namespace: string, name: string, signal?: AbortSignal): Promise<Record<string, string>> {
    try {
      const secret = await this.kube.resource<SecretObject>(GVR.secrets).get(namespace, name, signal);
      // Every value read is redacted from status, Events and logs from now on, wherever it turns up.
      for (const v of Object.values(secret.data ?? {}))
        rememberSecret(Buffer.from(v, 'base64').toString('utf8'));
      return secret.data ?? {};
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) {
        throw new SecretNotFoundError(`Secret ${namespace}/${name} not found`);
      }
      if (err instanceof ApiError && err.code === 403) {
        throw new SecretNotFoundError(`the operator may not read Secret ${namespace}/${name} (RBAC)`);
      }
      throw err;
    }
  }

  /** One key, decoded as UTF-8 and trimmed of a trailing newline (as `kubectl create secret --from-file` leaves). */
  async value(namespace: string, ref: { name: string; key: string }, signal?: AbortSignal): Promise<string> {
    const data = await this.data(namespace, ref.name, signal);
    const raw = data[ref.key];
    if (raw === undefined || raw === '') {
      throw new SecretNotFoundError(`Secret ${namespace}/${ref.name} has no key "${ref.key}"`);
    }
    return Buffer.from(raw, 'base64')
      .toString('utf8')
      .replace(/\r?\n$/, '');
  }
}
