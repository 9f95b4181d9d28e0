/**
 * `peerload operator`: runs the controllers of src/controllers with the runtime's manager (informers,
 * leader election, /metrics /healthz /readyz, graceful shutdown on SIGTERM/SIGINT).
 */
import { ConfigError, loadConfig } from '../config.ts';
import { OPERATOR_IDENTITY, controllers } from '../controllers/index.ts';
import { KubeClient } from '../runtime/kube.ts';
import { loadKubeConfig } from '../runtime/kubeconfig.ts';
import { createLogger } from '../runtime/logger.ts';
import { Manager } from '../runtime/manager.ts';
import { closeModelServerPools } from '../servers/pools.ts';
import { CliError } from './errors.ts';

export async function run(argv: string[]): Promise<number> {
  let loaded: ReturnType<typeof loadConfig>;
  try {
    loaded = loadConfig(argv);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message);
    throw err;
  }
  if ('help' in loaded) {
    console.log(loaded.help);
    return 0;
  }
  const { config } = loaded;
  const logger = createLogger(config.logLevel);
  let kube: KubeClient;
  try {
    kube = new KubeClient(await loadKubeConfig(config.kubeconfig), OPERATOR_IDENTITY.kubeIdentity);
  } catch (err) {
    throw new CliError(`--kubeconfig: ${(err as Error).message}`);
  }
  let manager: Manager;
  try {
    manager = new Manager({ config, logger, kube, ...OPERATOR_IDENTITY }).add(...controllers);
  } catch (err) {
    // A configuration the manager cannot serve (e.g. --metrics-cert-dir without a readable key pair).
    throw new CliError((err as Error).message);
  }
  logger.info(
    {
      identity: config.identity,
      namespace: config.namespace || '*',
      leaderElect: config.leaderElect,
      controllers: controllers.length,
    },
    'starting operator',
  );
  // An admin who turns the reach policy off should see it at every start (docs/security.md).
  for (const [flag, rules] of [
    ['--allowed-manager-hosts', config.allowedManagerHosts],
    ['--allowed-endpoint-hosts', config.allowedEndpointHosts],
    ['--allowed-storage-hosts', config.allowedStorageHosts],
    ['--allowed-registry-hosts', config.allowedRegistryHosts],
    ['--allowed-basic-auth-registry-hosts', config.allowedBasicAuthRegistryHosts],
    ['--allowed-hub-hosts', config.allowedHubHosts],
    ['--allowed-hub-redirect-hosts', config.allowedHubRedirectHosts],
  ] as const)
    if (rules.some((r) => r.name === '*'))
      logger.warn(
        { flag },
        `${flag} allows every host: whoever may create a ModelPreheat or ServedModel can have the operator send their namespace's Secrets anywhere (not for a shared cluster)`,
      );
  let code: number;
  try {
    code = await manager.run();
  } catch (err) {
    logger.fatal({ err: (err as Error).message }, 'operator failed');
    code = 1;
  }
  logger.flush();
  // Abandoned reconciles may still hold sockets or timers: do not let them keep the process alive. The timer
  // is unref'd, so a process with nothing left exits by itself first.
  setTimeout(() => process.exit(code), 2_000).unref();
  // The replicas' keep-alive sockets: closed once the reconciles that used them are done or abandoned.
  await closeModelServerPools();
  return code;
}
