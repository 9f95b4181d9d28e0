/**
 * Prometheus metrics (prom-client), on a registry of their own so that several managers can live in one process
 * (tests). Names and labels are the ones the ecosystem's dashboards and alerts expect:
 * - controller-runtime's: `controller_runtime_reconcile_*`, `controller_runtime_active_workers`,
 *   `controller_runtime_max_concurrent_reconciles`, `workqueue_*` (labels `controller` and `name`),
 *   client-go's `leader_election_master_status` and `rest_client_requests_total`;
 * - Node's process metrics as prom-client names them, unprefixed (`process_cpu_seconds_total`, `nodejs_*`);
 * - the runtime's own (informer restarts) under the product's prefix (`namespace`);
 * - a product's own, registered on the same registry through {@link Metrics.register}.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { QueueMetrics } from './workqueue.ts';
import type { KubeClient } from './kube.ts';

/** What the unfinished-work gauges read from a queue at scrape time. */
export interface InFlightProbe {
  /** Start times (ms since epoch) of the keys being processed now. */
  inFlightSince(): Iterable<number>;
}

/** controller-runtime's reconcile time buckets. */
const RECONCILE_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5,
  1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];
/** client-go's workqueue buckets: 10^-8 .. 10^1 s. */
const QUEUE_BUCKETS = Array.from({ length: 10 }, (_, i) => 10 ** (i - 8));

export class Metrics {
  readonly registry = new Registry();
  readonly reconcileTotal: Counter<'controller' | 'result'>;
  readonly reconcileErrors: Counter<'controller'>;
  readonly reconcileDuration: Histogram<'controller'>;
  readonly activeWorkers: Gauge<'controller'>;
  readonly maxConcurrentReconciles: Gauge<'controller'>;
  readonly queueDepth: Gauge<'controller' | 'name'>;
  readonly queueLatency: Histogram<'controller' | 'name'>;
  readonly queueWork: Histogram<'controller' | 'name'>;
  readonly queueAdds: Counter<'controller' | 'name'>;
  readonly queueRetries: Counter<'controller' | 'name'>;
  readonly leader: Gauge<'name'>;
  readonly kubeRequests: Counter<'code' | 'host' | 'method'>;
  readonly informerRestarts: Counter<'resource' | 'kind'>;
  private readonly queues = new Map<string, InFlightProbe>();
  private readonly extensions = new Map<(registry: Registry) => unknown, unknown>();

  /**
   * `namespace`: the prefix of the metrics that have no ecosystem name (e.g. `example` gives
   * `example_informer_restarts_total`); none gives them unprefixed.
   */
  constructor(opts: { namespace?: string; processMetrics?: boolean } = {}) {
    const prefix = opts.namespace ? `${opts.namespace}_` : '';
    const registers = [this.registry];
    if (opts.processMetrics ?? true) {
      // 100 ms event-loop sampling instead of 10 ms: cheaper for an operator that is mostly idle.
      collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 100 });
    }
    this.reconcileTotal = new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Total number of reconciliations per controller (result: success, requeue_after, error, terminal).',
      labelNames: ['controller', 'result'],
      registers,
    });
    this.reconcileErrors = new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Total number of reconciliation errors per controller.',
      labelNames: ['controller'],
      registers,
    });
    this.reconcileDuration = new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Length of time per reconciliation per controller.',
      labelNames: ['controller'],
      buckets: RECONCILE_BUCKETS,
      registers,
    });
    this.activeWorkers = new Gauge({
      name: 'controller_runtime_active_workers',
      help: 'Number of currently used workers per controller.',
      labelNames: ['controller'],
      registers,
    });
    this.maxConcurrentReconciles = new Gauge({
      name: 'controller_runtime_max_concurrent_reconciles',
      help: 'Maximum number of concurrent reconciles per controller.',
      labelNames: ['controller'],
      registers,
    });
    const queue = workqueueMetrics(registers);
    this.queueDepth = queue.depth;
    this.queueLatency = queue.latency;
    this.queueWork = queue.work;
    this.queueAdds = queue.adds;
    this.queueRetries = queue.retries;
    this.inFlightGauges(registers);
    this.leader = new Gauge({
      name: 'leader_election_master_status',
      help: 'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master.',
      labelNames: ['name'],
      registers,
    });
    this.kubeRequests = new Counter({
      name: 'rest_client_requests_total',
      help: 'Number of HTTP requests to the kube-apiserver, partitioned by status code, method, and host (code 0: no response).',
      labelNames: ['code', 'host', 'method'],
      registers,
    });
    this.informerRestarts = new Counter({
      name: `${prefix}informer_restarts_total`,
      help: 'Informer lists and watch (re)starts, by resource.',
      labelNames: ['resource', 'kind'],
      registers,
    });
  }

  /** The in-flight gauges of every queue: computed when scraped, from the items each queue is working on. */
  private inFlightGauges(registers: Registry[]): void {
    const queueLabels = ['controller', 'name'] as const;
    const queues = this.queues;
    new Gauge({
      name: 'workqueue_unfinished_work_seconds',
      help:
        'How many seconds of work has been done that is in progress and has not been observed by work_duration. ' +
        'Large values indicate stuck threads.',
      labelNames: queueLabels,
      registers,
      collect() {
        const now = Date.now();
        for (const [name, q] of queues) {
          let total = 0;
          for (const since of q.inFlightSince()) total += now - since;
          this.labels(name, name).set(total / 1000);
        }
      },
    });
    new Gauge({
      name: 'workqueue_longest_running_processor_seconds',
      help: 'How many seconds has the longest running processor for workqueue been running.',
      labelNames: queueLabels,
      registers,
      collect() {
        const now = Date.now();
        for (const [name, q] of queues) {
          let oldest = now;
          for (const since of q.inFlightSince()) oldest = Math.min(oldest, since);
          this.labels(name, name).set((now - oldest) / 1000);
        }
      },
    });
  }

  /**
   * A product's own metrics on this registry (served on the same /metrics): `create` registers them and runs
   * once per registry; later calls with the same function return the same set, so every controller of one
   * manager may ask for them.
   */
  register<T>(create: (registry: Registry) => T): T {
    if (!this.extensions.has(create)) this.extensions.set(create, create(this.registry));
    return this.extensions.get(create) as T;
  }

  /** The queue metrics of one controller; `probe` lets the unfinished-work gauges see its in-flight keys. */
  queue(name: string, probe?: InFlightProbe): QueueMetrics {
    const depth = this.queueDepth.labels(name, name);
    const latency = this.queueLatency.labels(name, name);
    const work = this.queueWork.labels(name, name);
    const adds = this.queueAdds.labels(name, name);
    const retries = this.queueRetries.labels(name, name);
    if (probe) this.queues.set(name, probe);
    // Every series exists from the start (at zero), as client-go's do: dashboards and rate() need no first event.
    depth.set(0);
    adds.inc(0);
    retries.inc(0);
    this.queueLatency.zero({ controller: name, name });
    this.queueWork.zero({ controller: name, name });
    return {
      depth: (n) => depth.set(n),
      latency: (ms) => latency.observe(ms / 1000),
      work: (ms) => work.observe(ms / 1000),
      add: () => adds.inc(),
      retry: () => retries.inc(),
    };
  }

  observeKube(kube: KubeClient): () => void {
    const host = new URL(kube.server).host;
    return kube.onRequest((r) => {
      if (!r.watch) this.kubeRequests.labels(String(r.status), host, r.method).inc();
    });
  }
}

/** client-go's workqueue metrics, by controller and queue. */
function workqueueMetrics(registers: Registry[]) {
  const queueLabels = ['controller', 'name'] as const;
  const depth = new Gauge({
    name: 'workqueue_depth',
    help: 'Current depth of workqueue.',
    labelNames: queueLabels,
    registers,
  });
  const latency = new Histogram({
    name: 'workqueue_queue_duration_seconds',
    help: 'How long in seconds an item stays in workqueue before being requested.',
    labelNames: queueLabels,
    buckets: QUEUE_BUCKETS,
    registers,
  });
  const work = new Histogram({
    name: 'workqueue_work_duration_seconds',
    help: 'How long in seconds processing an item from workqueue takes.',
    labelNames: queueLabels,
    buckets: QUEUE_BUCKETS,
    registers,
  });
  const adds = new Counter({
    name: 'workqueue_adds_total',
    help: 'Total number of adds handled by workqueue.',
    labelNames: queueLabels,
    registers,
  });
  const retries = new Counter({
    name: 'workqueue_retries_total',
    help: 'Total number of retries handled by workqueue.',
    labelNames: queueLabels,
    registers,
  });
  return { depth, latency, work, adds, retries };
}
