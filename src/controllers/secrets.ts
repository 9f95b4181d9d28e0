/**
 * Reads Secrets the resources refer to. Direct GETs, not a cluster-wide Secret watch: the operator needs a
 * handful of Secrets only when it acts (creates a job, renews a token), and caching every Secret of the cluster
 * in memory would cost RAM and a broad `watch secrets` permission. What it read is kept for `ttlMs` (polls and
 * every model-server request ask for tokens), and concurrent reads of one Secret share one GET (single-flight);
 * a failed read is not kept.
 */
import { ApiError } from '../runtime/kube.ts';
import { GVR, type KubeClient, type KubeObject } from '../runtime/index.ts';
import { abortable } from '../http/abortable.ts';
import { forgetSecretData, rememberSecretData } from '../redact.ts';

/** A Secret, or one of its keys, is missing. The message names both; it never carries a value. */
export class SecretNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SecretNotFoundError';
  }
}

type SecretObject = KubeObject & { data?: Record<string, string> };

export interface SecretReaderOptions {
  /** How long a read Secret is reused. Default 5 s; 0: never. */
  ttlMs?: number;
  now?: () => number;
}

export class SecretReader {
  private readonly kube: KubeClient;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private readonly cache = new Map<string, { at: number; data: Promise<Record<string, string>> }>();

  constructor(kube: KubeClient, opts: SecretReaderOptions = {}) {
    this.kube = kube;
    this.ttlMs = opts.ttlMs ?? 5_000;
    this.now = opts.now ?? Date.now;
  }

  /** The Secret's data map, values still base64 as the API returns them. */
  data(namespace: string, name: string, signal?: AbortSignal): Promise<Record<string, string>> {
    const id = `${namespace}/${name}`;
    const now = this.now();
    // Expired entries go as reads come, so Secrets nobody asks for any more do not stay in memory.
    for (const [k, e] of this.cache) if (now - e.at >= this.ttlMs) this.cache.delete(k);
    let entry = this.cache.get(id);
    if (!entry) {
      // Shared by every caller, so no caller's signal ends it; each caller still stops waiting on its own.
      const data = this.read(namespace, name);
      entry = { at: now, data };
      data.catch(() => {
        if (this.cache.get(id)?.data === data) this.cache.delete(id);
      });
      if (this.ttlMs > 0) this.cache.set(id, entry);
    }
    // The signal is usually the controller's, alive as long as the process: abortable removes its listener again.
    return abortable(entry.data, signal);
  }

  private async read(namespace: string, name: string): Promise<Record<string, string>> {
    try {
      const secret = await this.kube.resource<SecretObject>(GVR.secrets).get(namespace, name);
      // Every value read is redacted from status, Events and logs from now on, wherever it turns up; what the
      // Secret held before (a rotated key) is no longer, so what is remembered stays bounded by the Secrets in use.
      rememberSecretData(
        `${namespace}/${name}`,
        Object.fromEntries(
          Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
        ),
      );
      return secret.data ?? {};
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) {
        forgetSecretData(`${namespace}/${name}`);
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
