/**
 * peerload's own metrics (`peerload_*`), registered on the runtime's registry so that one /metrics serves them
 * beside controller-runtime's. Names and help texts are what deploy/monitoring queries: keep them stable.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Metrics } from '../runtime/index.ts';

/** The prefix of peerload's metrics, the runtime's own unnamed ones (informer restarts) included. */
export const METRICS_NAMESPACE = 'peerload';

export interface OperatorMetrics {
  preheatJobs: Counter<'result'>;
  replicasReady: Gauge<'namespace' | 'name'>;
  replicasDesired: Gauge<'namespace' | 'name'>;
  managerErrors: Counter<'kind'>;
  modelServerErrors: Counter<'kind'>;
  /** The replica gauges of one ServedModel; `undefined` counts remove them (the resource is gone). */
  servedModelReplicas(namespace: string, name: string, ready?: number, desired?: number): void;
}

/** peerload's metrics on `metrics`' registry, created on first use and shared by every controller after. */
export function operatorMetrics(metrics: Metrics): OperatorMetrics {
  return metrics.register(createOperatorMetrics);
}

function createOperatorMetrics(registry: Registry): OperatorMetrics {
  const registers = [registry];
  const replicasReady = new Gauge({
    name: `${METRICS_NAMESPACE}_servedmodel_replicas_ready`,
    help: 'Replicas where the ServedModel is READY.',
    labelNames: ['namespace', 'name'],
    registers,
  });
  const replicasDesired = new Gauge({
    name: `${METRICS_NAMESPACE}_servedmodel_replicas_desired`,
    help: 'Replicas the ServedModel should be READY on (ready endpoints found).',
    labelNames: ['namespace', 'name'],
    registers,
  });
  return {
    preheatJobs: new Counter({
      name: `${METRICS_NAMESPACE}_preheat_jobs_total`,
      help: 'Preheat jobs that ended, by result: succeeded, retried (failed, another attempt follows), failed (for good).',
      labelNames: ['result'],
      registers,
    }),
    replicasReady,
    replicasDesired,
    managerErrors: new Counter({
      name: `${METRICS_NAMESPACE}_manager_request_errors_total`,
      help: 'Failed requests to the P2P manager, by kind: auth, notFound, terminal, retryable, conflict.',
      labelNames: ['kind'],
      registers,
    }),
    modelServerErrors: new Counter({
      name: `${METRICS_NAMESPACE}_modelserver_request_errors_total`,
      help: 'Failed requests to model-server replicas, by kind: auth, notFound, conflict, terminal, retryable, other.',
      labelNames: ['kind'],
      registers,
    }),
    servedModelReplicas(namespace, name, ready, desired) {
      if (ready === undefined || desired === undefined) {
        replicasReady.remove(namespace, name);
        replicasDesired.remove(namespace, name);
        return;
      }
      replicasReady.labels(namespace, name).set(ready);
      replicasDesired.labels(namespace, name).set(desired);
    },
  };
}
