/**
 * The controllers the operator runs. Each entry builds one Controller from the shared context
 * (informers, clients, status writer, event recorder, config); see src/runtime/manager.ts.
 */
import type { OperatorConfig } from '../config.ts';
import type { ControllerFactory } from '../runtime/index.ts';
import { KUBE_IDENTITY, REPORTING_CONTROLLER } from '../version.ts';
import { METRICS_NAMESPACE } from './metrics.ts';
import { modelPreheatController } from './modelpreheat/index.ts';
import { servedModelController } from './servedmodel/index.ts';

export { createServedModelController, servedModelController } from './servedmodel/index.ts';

export const controllers: ControllerFactory[] = [modelPreheatController, servedModelController];

/** What the runtime's Manager is told of peerload (it knows no product): who reports the Events, the prefix
 *  of the runtime's metrics without an ecosystem name (`peerload_informer_restarts_total`) and how its
 *  Kubernetes client names itself (fieldManager, User-Agent). */
export const OPERATOR_IDENTITY = {
  reportingController: REPORTING_CONTROLLER,
  metricsNamespace: METRICS_NAMESPACE,
  kubeIdentity: KUBE_IDENTITY,
} as const;

declare module '../runtime/manager.ts' {
  /** peerload's controllers read the operator's configuration (flags and environment) from their context. */
  // eslint-disable-next-line @typescript-eslint/no-empty-object-type -- adds OperatorConfig's members
  interface ControllerConfig extends OperatorConfig {}
}
