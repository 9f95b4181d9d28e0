/**
 * Prometheus metrics of the runtime (prom-client), on a registry of their own so that several managers can
 * live in one process (tests). Names follow controller-runtime's where one exists, prefixed `peerload_`.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { QueueMetrics } from './workqueue.ts';
import type { KubeClient } from './kube.ts';

export class Metrics {
  readonly registry = new Registry();
  readonly reconcileTotal: Counter<'controller' | 'result'>;
  readonly reconcileErrors: Counter<'controller'>;
  readonly reconcileDuration: Histogram<'controller'>;
  readonly queueDepth: Gauge<'name'>;
  readonly queueLatency: Histogram<'name'>;
  readonly queueAdds: Counter<'name'>;
  readonly queueRetries: Counter<'name'>;
  readonly activeWorkers: Gauge<'controller'>;
  readonly leader: Gauge<'name'>;
  readonly kubeRequests: Counter<'method' | 'code'>;
  readonly informerRestarts: Counter<'resource' | 'kind'>;

  constructor(opts: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (opts.processMetrics ?? true) {
      // 100 ms event-loop sampling instead of 10 ms: cheaper for an operator that is mostly idle.
      collectDefaultMetrics({
        register: this.registry,
        prefix: 'peerload_',
        eventLoopMonitoringPrecision: 100,
      });
    }
    this.reconcileTotal = new Counter({
      name: 'peerload_reconcile_total',
      help: 'Reconciles per controller and result (success, requeue_after, error, terminal).',
      labelNames: ['controller', 'result'],
      registers,
    });
    this.reconcileErrors = new Counter({
      name: 'peerload_reconcile_errors_total',
      help: 'Reconciles that failed (retried or terminal).',
      labelNames: ['controller'],
      registers,
    });
    this.reconcileDuration = new Histogram({
      name: 'peerload_reconcile_duration_seconds',
      help: 'Time of one reconcile.',
      labelNames: ['controller'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.queueDepth = new Gauge({
      name: 'peerload_workqueue_depth',
      help: 'Keys waiting in the work queue.',
      labelNames: ['name'],
      registers,
    });
    this.queueLatency = new Histogram({
      name: 'peerload_workqueue_queue_duration_seconds',
      help: 'Time a key waits in the work queue before a worker takes it.',
      labelNames: ['name'],
      buckets: [0.0001, 0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60],
      registers,
    });
    this.queueAdds = new Counter({
      name: 'peerload_workqueue_adds_total',
      help: 'Keys added to the work queue.',
      labelNames: ['name'],
      registers,
    });
    this.queueRetries = new Counter({
      name: 'peerload_workqueue_retries_total',
      help: 'Rate-limited re-adds (retries after errors).',
      labelNames: ['name'],
      registers,
    });
    this.activeWorkers = new Gauge({
      name: 'peerload_controller_active_workers',
      help: 'Workers currently reconciling.',
      labelNames: ['controller'],
      registers,
    });
    this.leader = new Gauge({
      name: 'peerload_leader_election_master_status',
      help: '1 while this instance holds the lease, else 0.',
      labelNames: ['name'],
      registers,
    });
    this.kubeRequests = new Counter({
      name: 'peerload_kube_requests_total',
      help: 'Requests to the kube-apiserver by method and HTTP status (0: no response).',
      labelNames: ['method', 'code'],
      registers,
    });
    this.informerRestarts = new Counter({
      name: 'peerload_informer_restarts_total',
      help: 'Informer lists and watch (re)starts, by resource.',
      labelNames: ['resource', 'kind'],
      registers,
    });
  }

  queue(name: string): QueueMetrics {
    const depth = this.queueDepth.labels(name);
    const latency = this.queueLatency.labels(name);
    const adds = this.queueAdds.labels(name);
    const retries = this.queueRetries.labels(name);
    return {
      depth: (n) => depth.set(n),
      latency: (ms) => latency.observe(ms / 1000),
      add: () => adds.inc(),
      retry: () => retries.inc(),
    };
  }

  observeKube(kube: KubeClient): () => void {
    return kube.onRequest((r) => {
      if (!r.watch) this.kubeRequests.labels(r.method, String(r.status)).inc();
    });
  }
}
