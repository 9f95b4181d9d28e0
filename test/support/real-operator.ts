/**
 * The operator's ModelPreheat and ServedModel controllers in-process against the real Dragonfly network's manager,
 * as the real-network e2e tests run them: the ServedModel controller reaches replicas through `loopbackDispatcher`.
 */
import type * as k8s from '@kubernetes/client-node';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import type { ControllerFactory } from '../../src/runtime/index.ts';
import { loopbackDispatcher } from './endpointslices.ts';
import { startManager, type RunningManager } from './runtime-harness.ts';

/**
 * `hosts` maps the addresses of EndpointSlices to where the replicas listen on this machine (loopbackDispatcher);
 * `servedModels: false` runs the ModelPreheat controller alone.
 */
export function startRealNetworkOperator(
  kc: k8s.KubeConfig,
  managerURL: string,
  extraFlags: string[] = [],
  o: { hosts?: Parameters<typeof loopbackDispatcher>[0]; servedModels?: boolean } = {},
): Promise<RunningManager> {
  const factories: ControllerFactory[] = [modelPreheatController];
  if (o.servedModels !== false)
    factories.push((ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher(o.hosts) }));
  return startManager(
    kc,
    [
      '--no-leader-elect',
      '--manager-url',
      managerURL,
      // The resources name the real manager on loopback: the admin allows it.
      '--allowed-manager-hosts',
      '127.0.0.1',
      '--poll-backoff-start',
      '1s',
      '--poll-backoff-max',
      '5s',
      ...extraFlags,
    ],
    factories,
  );
}
