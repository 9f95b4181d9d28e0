/**
 * `peerload publish-keys`: the TorchServe sidecar that keeps this pod's key_file.json in a Secret key `<pod>.json`
 * (src/modelserver/key-publisher.ts), so the operator can use token authorization per replica.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { parseDuration } from '../api/common.ts';
import { publishKeys } from '../modelserver/key-publisher.ts';
import { KubeClient } from '../runtime/kube.ts';
import { loadKubeConfig } from '../runtime/kubeconfig.ts';
import { createLogger } from '../runtime/logger.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { KUBE_IDENTITY } from '../version.ts';

const HELP = `Usage: peerload publish-keys --secret NAME [options]

Publishes TorchServe's key_file.json into the Secret key <pod>.json and keeps it current (rotation, restart);
removes the key on SIGTERM. Needs get and patch on that Secret only; the Secret must exist.

Options (flag, or the environment variable in brackets):
  --secret NAME          Secret holding one key per pod [PEERLOAD_KEYS_SECRET]
  --key-file PATH        TorchServe's key file; default key_file.json (its working directory) [PEERLOAD_KEY_FILE]
  --pod NAME             Pod name; default $POD_NAME, else the host name
  --namespace NS         Namespace of the Secret; default $POD_NAMESPACE, else the service account's
  --poll-interval D      Re-read the file this often as well as on change events; default 5s
  --kubeconfig PATH      default: in-cluster, else $KUBECONFIG
  --log-level LEVEL      default info [PEERLOAD_LOG_LEVEL]`;

const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const { values } = parseCommandArgs(argv, {
    secret: { type: 'string' },
    'key-file': { type: 'string' },
    pod: { type: 'string' },
    namespace: { type: 'string' },
    'poll-interval': { type: 'string', default: '5s' },
    kubeconfig: { type: 'string' },
    'log-level': { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const secret = values.secret ?? env.PEERLOAD_KEYS_SECRET;
  if (!secret) throw new CliError('--secret is required: the Secret that holds one key per pod');
  if (!NAME.test(secret)) throw new CliError(`--secret "${secret}" is not a Secret name`);
  const pod = values.pod ?? env.POD_NAME ?? hostname();
  const namespace = values.namespace ?? env.POD_NAMESPACE ?? serviceAccountNamespace();
  if (!namespace)
    throw new CliError('--namespace is required outside a pod (or set POD_NAMESPACE from the downward API)');
  let pollMs: number;
  try {
    pollMs = parseDuration(values['poll-interval']);
  } catch {
    throw new CliError(`--poll-interval "${values['poll-interval']}" is not a duration, e.g. 5s`);
  }
  if (pollMs < 100) throw new CliError('--poll-interval must be at least 100ms');
  const logLevel = values['log-level'] ?? env.PEERLOAD_LOG_LEVEL ?? 'info';
  const logger = createLogger(logLevel as Parameters<typeof createLogger>[0]);
  let kube: KubeClient;
  try {
    kube = new KubeClient(await loadKubeConfig(values.kubeconfig), KUBE_IDENTITY);
  } catch (err) {
    throw new CliError(`--kubeconfig: ${(err as Error).message}`);
  }
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  try {
    await publishKeys(
      {
        kube,
        namespace,
        secret,
        pod,
        keyFile: values['key-file'] ?? env.PEERLOAD_KEY_FILE ?? 'key_file.json',
        pollMs,
        logger,
      },
      stop.signal,
    );
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    await kube.close();
    logger.flush();
  }
  return 0;
}

function serviceAccountNamespace(): string | undefined {
  try {
    return (
      readFileSync('/var/run/secrets/kubernetes.io/serviceaccount/namespace', 'utf8').trim() || undefined
    );
  } catch {
    return undefined;
  }
}
