/**
 * The controllers the operator runs. Each entry builds one Controller from the shared context
 * (informers, clients, status writer, event recorder, config); see src/runtime/manager.ts.
 */
import type { ControllerFactory } from '../runtime/index.ts';
import { REPORTING_CONTROLLER } from '../version.ts';
import { METRICS_NAMESPACE } from './metrics.ts';
import { modelPreheatController } from './modelpreheat.ts';
import { servedModelController } from './servedmodel/index.ts';

export {
  createServedModelController,
  servedModelController,
  type ServedModelControllerOptions,
} from './servedmodel/index.ts';

export const controllers: ControllerFactory[] = [modelPreheatController, servedModelController];

/** What the runtime's Manager is told of peerload (it knows no product): who reports the Events and the prefix
 *  of the runtime's metrics without an ecosystem name (`peerload_informer_restarts_total`). */
export const OPERATOR_IDENTITY = {
  reportingController: REPORTING_CONTROLLER,
  metricsNamespace: METRICS_NAMESPACE,
} as const;
