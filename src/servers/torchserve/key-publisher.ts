/**
 * Publishes one TorchServe replica's `key_file.json` into a shared Secret, under the key `<pod>.json` that a
 * ServedModel's `managementTokenSecretRef: {key: "{pod}.json"}` reads (see auth.ts). It runs as a sidecar of the
 * model-server pod, so token authorization can stay on: every TorchServe process draws its own keys, rewrites
 * the file when a key is rotated (GET /token) and draws new ones when it restarts.
 *
 * Minimal rights: `get` and `patch` of that one Secret (resourceNames). The Secret is never created or replaced:
 * each replica merge-patches only its own key, so replicas never overwrite each other. On shutdown (SIGTERM, the
 * pod going away) the key is removed. No finalizer: a pod lost without SIGTERM (its node died) leaves a stale key
 * that nothing reads -- the operator looks keys up by the pod names of the Service's endpoints, and a new pod
 * with the same name overwrites it when its publisher starts.
 *
 * Nothing here logs key material: only the Secret, the data key and the key file's path.
 */
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import { GVR, isNotFound, type KubeClient, type KubeObject } from '../../runtime/kube.ts';
import { parseKeyFile } from './auth.ts';

export interface KeyPublisherOptions {
  kube: KubeClient;
  namespace: string;
  /** Secret that holds one key per pod. */
  secret: string;
  /** This pod's name: the data key is `<pod>.json`. */
  pod: string;
  /** TorchServe's key_file.json (in its working directory). */
  keyFile: string;
  /** Poll interval, ms: a backstop for file systems whose change events are unreliable (network volumes). */
  pollMs: number;
  logger: Logger;
}

/** Publishes until `signal` aborts, then removes this pod's key. Resolves after the removal. */
export async function publishKeys(opts: KeyPublisherOptions, signal: AbortSignal): Promise<void> {
  const { kube, namespace, secret, pod, keyFile, logger } = opts;
  const dataKey = `${pod}.json`;
  const where = { secret: `${namespace}/${secret}`, key: dataKey, keyFile };
  const secrets = kube.resource<KubeObject>(GVR.secrets);
  let published: string | undefined;
  let waitingLogged = false;

  const publishOnce = async (): Promise<void> => {
    let text: string;
    try {
      text = await readFile(keyFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      if (!waitingLogged) logger.info(where, 'waiting for TorchServe to write its key file');
      waitingLogged = true;
      return;
    }
    if (text === published) return;
    // A half-written file fails here; the next change event or poll reads the whole file.
    parseKeyFile(text);
    await secrets.patch(namespace, secret, { data: { [dataKey]: Buffer.from(text).toString('base64') } });
    logger.info(where, published === undefined ? 'published keys' : 'published rotated keys');
    published = text;
  };

  // Single flight: events arriving during a publish run it once more afterwards, never concurrently.
  let running: Promise<void> | undefined;
  let again = false;
  const trigger = (): void => {
    if (signal.aborted) return;
    if (running) {
      again = true;
      return;
    }
    running = (async () => {
      do {
        again = false;
        try {
          await publishOnce();
        } catch (err) {
          logger.warn({ ...where, err: describe(err, secret) }, 'could not publish keys; retrying');
        }
      } while (again && !signal.aborted);
    })().finally(() => (running = undefined));
  };

  let watcher: FSWatcher | undefined;
  try {
    // The directory, not the file: TorchServe replaces the file, and it may not exist yet.
    watcher = watch(dirname(keyFile), (_event, name) => {
      if (!name || name === basename(keyFile)) trigger();
    });
    watcher.on('error', (err) =>
      logger.warn({ ...where, err: err.message }, 'key file watch failed; polling'),
    );
  } catch (err) {
    logger.warn({ ...where, err: (err as Error).message }, 'cannot watch the key file directory; polling');
  }
  const poll = setInterval(trigger, opts.pollMs);
  trigger();
  await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  clearInterval(poll);
  watcher?.close();
  await running;

  try {
    await secrets.patch(namespace, secret, { data: { [dataKey]: null } });
    logger.info(where, 'removed keys');
  } catch (err) {
    if (!isNotFound(err)) logger.warn({ ...where, err: describe(err, secret) }, 'could not remove keys');
  }
}

function describe(err: unknown, secret: string): string {
  if (isNotFound(err))
    return `Secret ${secret} not found: create it (kubectl create secret generic ${secret}); the publisher only patches it`;
  return (err as Error).message;
}
