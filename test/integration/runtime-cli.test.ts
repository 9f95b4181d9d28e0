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
    const metrics = await (await fetch(url('/metrics'))).text();
    expect(metrics).toMatch(/peerload_leader_election_master_status\{name="peerload-operator"\} 1/);
    expect(metrics).toMatch(/peerload_kube_requests_total\{method="GET",code="200"\} \d+/);
    expect((await fetch(url('/nope'))).status).toBe(404);

    const t0 = Date.now();
    proc.child.kill('SIGTERM');
    expect(await proc.exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    const after = await coord.readNamespacedLease({ name: 'peerload-operator', namespace: ns });
    expect(after.spec?.holderIdentity ?? '').toBe('');
  });
});
