import { describe, expect, it } from 'vitest';
import { OPERATOR_IDENTITY } from '../../src/controllers/index.ts';
import { operatorMetrics } from '../../src/controllers/metrics.ts';
import { Metrics } from '../../src/runtime/metrics.ts';
import { WorkQueue } from '../../src/runtime/workqueue.ts';

const value = (text: string, series: string) => {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  if (!line) throw new Error(`no series ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
};

describe('workqueue metrics (client-go names)', () => {
  it('work duration, unfinished work and the longest running processor follow keys in flight', async () => {
    const metrics = new Metrics({ processMetrics: false });
    const queue: WorkQueue = new WorkQueue({
      metrics: metrics.queue('q', { inFlightSince: () => queue.inFlightSince() }),
    });
    const labels = '{controller="q",name="q"}';
    queue.add('a');
    queue.add('b');
    await queue.get();
    await new Promise((r) => setTimeout(r, 60));
    const b = await queue.get();
    await new Promise((r) => setTimeout(r, 40));
    let text = await metrics.registry.metrics();
    // a: ~100 ms, b: ~40 ms in flight.
    expect(value(text, `workqueue_unfinished_work_seconds${labels}`)).toBeGreaterThanOrEqual(0.13);
    expect(value(text, `workqueue_longest_running_processor_seconds${labels}`)).toBeGreaterThanOrEqual(0.09);
    expect(value(text, `workqueue_longest_running_processor_seconds${labels}`)).toBeLessThan(5);
    expect(value(text, `workqueue_adds_total${labels}`)).toBe(2);

    queue.done('a');
    queue.done(b!);
    text = await metrics.registry.metrics();
    expect(value(text, `workqueue_work_duration_seconds_count${labels}`)).toBe(2);
    expect(value(text, `workqueue_work_duration_seconds_sum${labels}`)).toBeGreaterThanOrEqual(0.13);
    expect(value(text, `workqueue_unfinished_work_seconds${labels}`)).toBe(0);
    expect(value(text, `workqueue_longest_running_processor_seconds${labels}`)).toBe(0);
  });

  it('ServedModel replica gauges are removed with the resource', async () => {
    const runtime = new Metrics({ processMetrics: false });
    const metrics = operatorMetrics(runtime);
    metrics.servedModelReplicas('ns', 'sm', 2, 3);
    let text = await runtime.registry.metrics();
    expect(value(text, 'peerload_servedmodel_replicas_ready{namespace="ns",name="sm"}')).toBe(2);
    expect(value(text, 'peerload_servedmodel_replicas_desired{namespace="ns",name="sm"}')).toBe(3);
    metrics.servedModelReplicas('ns', 'sm');
    text = await runtime.registry.metrics();
    expect(text).not.toContain('name="sm"');
  });
});

describe('product metrics on the runtime registry', () => {
  it("peerload's metrics are registered once per registry, whichever controller asks first", async () => {
    const runtime = new Metrics({ processMetrics: false, namespace: OPERATOR_IDENTITY.metricsNamespace });
    expect(operatorMetrics(runtime)).toBe(operatorMetrics(runtime));
    // A second manager in the same process gets its own set (prom-client would throw on a duplicate name).
    expect(operatorMetrics(new Metrics({ processMetrics: false }))).not.toBe(operatorMetrics(runtime));
    const names = (await runtime.registry.getMetricsAsJSON()).map((m) => m.name);
    expect(names.filter((n) => n.startsWith('peerload_')).sort()).toEqual([
      'peerload_informer_restarts_total',
      'peerload_manager_request_errors_total',
      'peerload_modelserver_request_errors_total',
      'peerload_preheat_jobs_total',
      'peerload_servedmodel_replicas_desired',
      'peerload_servedmodel_replicas_ready',
    ]);
  });

  it("the runtime's unnamed metrics take the product's prefix, and none without one", async () => {
    const names = async (m: Metrics) => (await m.registry.getMetricsAsJSON()).map((x) => x.name);
    expect(await names(new Metrics({ processMetrics: false, namespace: 'acme' }))).toContain(
      'acme_informer_restarts_total',
    );
    expect(await names(new Metrics({ processMetrics: false }))).toContain('informer_restarts_total');
  });
});
