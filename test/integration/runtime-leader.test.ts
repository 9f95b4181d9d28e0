/**
 * Two operator PROCESSES (test/support/test-operator.ts: the runtime's Manager with a recording ConfigMap
 * controller) with leader election at controller-runtime's defaults (15 s / 10 s / 2 s):
 * exactly one leads; SIGKILL of the leader hands over within 20 s; no reconcile runs in both at once;
 * /metrics /healthz /readyz answer; SIGTERM exits 0 within the deadline and clears the lease holder.
 */
import * as k8s from '@kubernetes/client-node';
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { freePort } from '../support/ports.ts';
import { startProcess, type ManagedProcess } from '../support/process.ts';
import { now, overlaps, sleep, type ReconcileRecord } from '../support/test-operator.ts';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const core = kc.makeApiClient(k8s.CoreV1Api);
const coord = kc.makeApiClient(k8s.CoordinationV1Api);
let ns: string;
const recordFile = join(tmpdir(), `peerload-leader-${process.pid}-${Date.now()}.jsonl`);
const procs = new Map<string, { proc: ManagedProcess; port: number }>();

function startOperator(identity: string, port: number): ManagedProcess {
  return startProcess(
    identity,
    join(REPO_ROOT, 'node_modules/.bin/node'),
    [
      join(REPO_ROOT, 'test/support/test-operator.ts'),
      '--kubeconfig',
      kubeconfigPath,
      '--namespace',
      ns,
      '--leader-election-namespace',
      ns,
      '--identity',
      identity,
      '--metrics-address',
      `127.0.0.1:${port}`,
      '--shutdown-timeout',
      '10s',
      '--log-level',
      'info',
    ],
    join(tmpdir(), `peerload-${identity}-${process.pid}.log`),
    { env: { ...process.env, TEST_RECORD_FILE: recordFile, TEST_SLEEP_MS: '100', TEST_REQUEUE_MS: '50' } },
  );
}

const records = (): ReconcileRecord[] =>
  readFileSync(recordFile, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as ReconcileRecord);
const holder = async () =>
  (await coord.readNamespacedLease({ name: 'peerload-operator', namespace: ns }).catch(() => undefined))?.spec
    ?.holderIdentity;
const get = async (port: number, path: string) => {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: r.status, body: await r.text() };
};

beforeAll(async () => {
  ns = await createNamespace(kc, 'rt-leader');
  writeFileSync(recordFile, '');
  for (let i = 0; i < 3; i++) {
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: `work-${i}` }, data: {} },
    });
  }
  for (const id of ['op-a', 'op-b']) {
    const port = await freePort();
    procs.set(id, { proc: startOperator(id, port), port });
  }
});

afterAll(async () => {
  for (const { proc } of procs.values()) await proc.kill('SIGKILL');
  await core.deleteNamespace({ name: ns }).catch(() => undefined);
});

describe('leader election across two processes', () => {
  it('one leads, fails over within 20 s after SIGKILL, never reconciles in both, and releases on SIGTERM', async () => {
    const leader = (await waitFor('a leader', holder, { timeoutMs: 60_000 }))!;
    const follower = leader === 'op-a' ? 'op-b' : 'op-a';
    const L = procs.get(leader)!;
    const F = procs.get(follower)!;
    await waitFor(
      'both serving',
      async () =>
        (await get(L.port, '/healthz')).status === 200 && (await get(F.port, '/healthz')).status === 200,
    );
    await waitFor('leader reconciling', () => records().filter((r) => r.identity === leader).length > 10);
    await sleep(2500);

    // Exactly one leads: only it reconciles; both are ready (a follower is ready with a warm cache).
    expect(await holder()).toBe(leader);
    expect(records().filter((r) => r.identity === follower)).toEqual([]);
    for (const p of [L, F]) {
      const ready = await get(p.port, '/readyz');
      expect(ready.status).toBe(200);
      expect(ready.body).toContain('[+]informers ok');
    }
    const lm = (await get(L.port, '/metrics')).body;
    const fm = (await get(F.port, '/metrics')).body;
    expect(lm).toMatch(/^leader_election_master_status\{name="peerload-operator"\} 1/m);
    expect(fm).toMatch(/^leader_election_master_status\{name="peerload-operator"\} 0/m);
    expect(lm).toMatch(
      /^controller_runtime_reconcile_total\{controller="test-configmaps",result="requeue_after"\} \d+/m,
    );
    expect(lm).toMatch(/^controller_runtime_reconcile_time_seconds_bucket/m);
    expect(lm).toMatch(/^workqueue_depth\{controller="test-configmaps",name="test-configmaps"\}/m);
    expect(lm).toMatch(
      /^workqueue_queue_duration_seconds_count\{controller="test-configmaps",name="test-configmaps"\} \d+/m,
    );
    expect(lm).toMatch(/^process_resident_memory_bytes \d+/m);

    // SIGKILL the leader: the follower takes over within 20 s.
    const killedAt = now();
    await L.proc.kill('SIGKILL');
    await waitFor('follower leads', async () => (await holder()) === follower, {
      timeoutMs: 25_000,
      intervalMs: 100,
    });
    const takeover = now() - killedAt;
    console.log(`leader failover after SIGKILL took ${Math.round(takeover)} ms`);
    expect(takeover).toBeLessThan(20_000);
    await waitFor('follower reconciling', () => records().filter((r) => r.identity === follower).length > 10);

    // No reconcile ran in both at once. Reconciles the kill interrupted ended at the kill.
    const all = records();
    const ended = new Set(all.filter((r) => r.phase === 'end').map((r) => r.reconcileID));
    for (const r of all.filter(
      (r) => r.phase === 'start' && r.identity === leader && !ended.has(r.reconcileID),
    )) {
      all.push({ ...r, phase: 'end', t: killedAt });
    }
    expect(all.filter((r) => r.identity === leader).length).toBeGreaterThan(10);
    expect(overlaps(all)).toEqual([]);
    const firstOfFollower = Math.min(...all.filter((r) => r.identity === follower).map((r) => r.t));
    expect(firstOfFollower).toBeGreaterThan(killedAt);
    expect((await get(F.port, '/metrics')).body).toMatch(
      /^leader_election_master_status\{name="peerload-operator"\} 1/m,
    );

    // SIGTERM: exits 0 within the 10 s deadline (reconciles take 100 ms) and clears holderIdentity.
    const termAt = now();
    F.proc.child.kill('SIGTERM');
    const code = await F.proc.exited;
    expect(code).toBe(0);
    expect(now() - termAt).toBeLessThan(10_000);
    expect(await holder()).toBeFalsy();
    const tail = records().filter((r) => r.identity === follower);
    const unfinished =
      tail.filter((r) => r.phase === 'start').length - tail.filter((r) => r.phase === 'end').length;
    expect(unfinished).toBe(0); // in-flight reconciles were finished, not cut off
  });
});

describe('leader election in-process', () => {
  it('stops the controllers and exits 1 when the lease is taken away (renew deadline passed)', async () => {
    const { startManager } = await import('../support/runtime-harness.ts');
    const { recordingController } = await import('../support/test-operator.ts');
    const recs: ReconcileRecord[] = [];
    const op = await startManager(
      kc,
      [
        '--namespace',
        ns,
        '--leader-election-namespace',
        ns,
        '--leader-election-id',
        'stolen',
        '--identity',
        'victim',
        '--lease-duration',
        '4s',
        '--renew-deadline',
        '2s',
        '--retry-period',
        '500ms',
      ],
      [recordingController({ identity: 'victim', record: (r) => recs.push(r) })],
    );
    const leases = () => coord.readNamespacedLease({ name: 'stolen', namespace: ns });
    await waitFor('victim leads', async () => (await leases()).spec?.holderIdentity === 'victim');
    await waitFor('victim reconciles', () => recs.length > 0);
    const lease = await leases();
    const t = new k8s.V1MicroTime();
    await coord.replaceNamespacedLease({
      name: 'stolen',
      namespace: ns,
      body: {
        ...lease,
        spec: { ...lease.spec, holderIdentity: 'thief', renewTime: t, leaseDurationSeconds: 60 },
      },
    });
    const code = await Promise.race([op.done, sleep(10_000).then(() => 'timeout')]);
    expect(code).toBe(1);
    expect(op.manager.isLeader()).toBe(false);
    expect((await leases()).spec?.holderIdentity).toBe('thief'); // not released: it was not ours any more
    const n = recs.length;
    await sleep(500);
    expect(recs.length).toBe(n);
  });
});
