/**
 * `peerload operator` as a real process (bin/peerload.js, the product controllers): it becomes ready, leads,
 * serves /metrics /healthz /readyz, and on SIGTERM exits 0 within the deadline and releases the lease.
 */
import * as k8s from '@kubernetes/client-node';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { freePort } from '../support/ports.ts';
import { startProcess, type ManagedProcess } from '../support/process.ts';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const coord = kc.makeApiClient(k8s.CoordinationV1Api);
const NODE = join(REPO_ROOT, 'node_modules/.bin/node');
const BIN = join(REPO_ROOT, 'bin/peerload.js');
let ns: string;
let proc: ManagedProcess | undefined;

beforeAll(async () => {
  ns = await createNamespace(kc, 'rt-cli');
});
afterAll(async () => {
  await proc?.kill('SIGKILL');
  await kc
    .makeApiClient(k8s.CoreV1Api)
    .deleteNamespace({ name: ns })
    .catch(() => undefined);
});

describe('peerload operator', () => {
  it('rejects a bad flag with a message naming it', () => {
    const r = spawnSync(NODE, [BIN, 'operator', '--resync-period', 'often'], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--resync-period \(PEERLOAD_RESYNC_PERIOD\): must be a duration/);
  });

  it('runs, leads, answers the probes, and exits 0 on SIGTERM with the lease released', async () => {
    const port = await freePort();
    const identity = `cli-${process.pid}`;
    proc = startProcess(
      'operator',
      NODE,
      [BIN, 'operator', '--kubeconfig', kubeconfigPath, '--namespace', ns, '--identity', identity],
      join(tmpdir(), `peerload-cli-${process.pid}.log`),
      {
        env: {
          ...process.env,
          PEERLOAD_LEADER_ELECTION_NAMESPACE: ns,
          PEERLOAD_METRICS_ADDRESS: `127.0.0.1:${port}`,
          PEERLOAD_SHUTDOWN_TIMEOUT: '10s',
          PEERLOAD_MANAGER_URL: 'http://127.0.0.1:9',
          // The ServedModel below names a static endpoint (refused unless allowed).
          PEERLOAD_ALLOWED_ENDPOINT_HOSTS: '127.0.0.1',
        },
      },
    );
    const url = (p: string) => `http://127.0.0.1:${port}${p}`;
    await waitFor('ready', async () => (await fetch(url('/readyz'))).status === 200, { timeoutMs: 30_000 });
    expect((await fetch(url('/healthz'))).status).toBe(200);
    const lease = await waitFor('leading', async () => {
      const l = await coord.readNamespacedLease({ name: 'peerload-operator', namespace: ns });
      return l.spec?.holderIdentity === identity ? l : undefined;
    });
    expect(lease.spec?.leaseDurationSeconds).toBe(15);
    // One resource of each kind that fails: the manager (port 9) and the model server (a closed port) do not answer.
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const create = (plural: string, kind: string, spec: object) =>
      custom.createNamespacedCustomObject({
        group: 'peerload.io',
        version: 'v1alpha1',
        namespace: ns,
        plural,
        body: { apiVersion: 'peerload.io/v1alpha1', kind, metadata: { name: 'm' }, spec },
      });
    await create('modelpreheats', 'ModelPreheat', { url: 'http://127.0.0.1:9/m.bin' });
    await create('servedmodels', 'ServedModel', {
      modelName: 'm',
      fileName: 'm.mar',
      modelServer: { endpoints: [`http://127.0.0.1:${await freePort()}`] },
    });
    const scrape = async () => (await fetch(url('/metrics'))).text();
    // A client's error is counted while its reconcile still runs: wait for the reconciles' results too.
    const metrics = await waitFor('domain metrics', async () => {
      const m = await scrape();
      return /^peerload_modelserver_request_errors_total\{kind="retryable"\} [1-9]/m.test(m) &&
        /^peerload_manager_request_errors_total\{kind="retryable"\} [1-9]/m.test(m) &&
        /^controller_runtime_reconcile_total\{controller="servedmodel",result="requeue_after"\} [1-9]/m.test(
          m,
        )
        ? m
        : undefined;
    });
    expect(metrics).toMatch(/^leader_election_master_status\{name="peerload-operator"\} 1/m);
    expect(metrics).toMatch(
      /^rest_client_requests_total\{code="200",host="127\.0\.0\.1:\d+",method="GET"\} \d+/m,
    );
    // controller-runtime's names and labels, so its dashboards and alerts work unchanged.
    for (const c of ['modelpreheat', 'servedmodel']) {
      const q = `controller="${c}",name="${c}"`;
      for (const line of [
        // The manager is down: modelpreheat retries with backoff (error); servedmodel polls the replica (requeue_after).
        `controller_runtime_reconcile_total{controller="${c}",result="${c === 'modelpreheat' ? 'error' : 'requeue_after'}"}`,
        `controller_runtime_reconcile_time_seconds_count{controller="${c}"}`,
        `controller_runtime_active_workers{controller="${c}"}`,
        `controller_runtime_max_concurrent_reconciles{controller="${c}"}`,
        `workqueue_depth{${q}}`,
        `workqueue_adds_total{${q}}`,
        `workqueue_queue_duration_seconds_count{${q}}`,
        `workqueue_work_duration_seconds_count{${q}}`,
        `workqueue_unfinished_work_seconds{${q}}`,
        `workqueue_longest_running_processor_seconds{${q}}`,
      ])
        expect(
          metrics.split('\n').some((l) => l.startsWith(line + ' ')),
          line,
        ).toBe(true);
    }
    expect(metrics).toMatch(/^controller_runtime_reconcile_errors_total\{controller="modelpreheat"\} \d+/m);
    expect(metrics).toMatch(/^workqueue_retries_total\{controller="modelpreheat",name="modelpreheat"\} \d+/m);
    // Node's process metrics unprefixed, as `process_*` alerts expect; nothing else carries the peerload_ prefix twice.
    expect(metrics).toMatch(/^process_cpu_seconds_total \d/m);
    expect(metrics).toMatch(/^process_resident_memory_bytes \d+/m);
    expect(metrics).toMatch(/^nodejs_eventloop_lag_seconds /m);
    expect(metrics).not.toMatch(/^peerload_(process|nodejs|workqueue|reconcile)/m);
    // peerload's own.
    expect(metrics).toMatch(/^peerload_servedmodel_replicas_desired\{namespace="[^"]+",name="m"\} 1/m);
    expect(metrics).toMatch(/^peerload_servedmodel_replicas_ready\{namespace="[^"]+",name="m"\} 0/m);
    expect(metrics).toMatch(/^# TYPE peerload_preheat_jobs_total counter/m);
    // Every write the operator made carries its field manager (managedFields said `unknown` before).
    const mph = (await custom.getNamespacedCustomObject({
      group: 'peerload.io',
      version: 'v1alpha1',
      namespace: ns,
      plural: 'modelpreheats',
      name: 'm',
    })) as { metadata: { managedFields: { manager: string; subresource?: string }[] } };
    const status = mph.metadata.managedFields.filter((f) => f.subresource === 'status');
    expect(status.map((f) => f.manager)).toEqual(['peerload-operator']);
    expect((await fetch(url('/nope'))).status).toBe(404);

    const t0 = Date.now();
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    const after = await coord.readNamespacedLease({ name: 'peerload-operator', namespace: ns });
    expect(after.spec?.holderIdentity ?? '').toBe('');
  });
});
