/**
 * ServedModel rollouts never block the operator: registrations run in the background, status shows each
 * replica's phase while they run, and an operator restarted mid-download waits for the download it started
 * instead of starting another (the plugin's 202 DownloadInProgress).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { ServedModel } from '../../src/api/index.ts';

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
const cleanups: (() => Promise<unknown>)[] = [];
const dispatcher = loopbackDispatcher();

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('smroll'));
});

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** One worker: any reconcile that waited for a download would hold up every other object. */
async function operator(): Promise<RunningManager> {
  const m = await startManager(
    kc,
    ['--no-leader-elect', '--workers', '1', '--poll-backoff-start', '100ms', '--poll-backoff-max', '1s'],
    [(ctx) => createServedModelController(ctx, { dispatcher, cleanupGraceMs: 2000 })],
  );
  let stopped = false;
  cleanups.push(() => (stopped ? Promise.resolve() : m.stop()));
  return {
    ...m,
    stop: () => {
      stopped = true;
      return m.stop();
    },
  };
}

async function fleet(
  n: number,
  opts: Parameters<typeof startModelServerFleet>[1],
): Promise<ModelServerFleet> {
  const f = await startModelServerFleet(n, opts);
  cleanups.push(() => f.close());
  return f;
}

/**
 * The replicas of a Service; gone from its EndpointSlices when the test's clean-up runs (before its fleet's ports
 * are free), so that no operator of a later test or file, whose own emulators may get those ports, registers this
 * file's models there.
 */
async function service(name: string, urls: string[]): Promise<void> {
  const svc = await ServiceEndpoints.of(kc, ns, name, urls);
  cleanups.push(async () => {
    for (const pod of [...svc.pods.keys()]) await svc.remove(pod);
  });
}

async function create(name: string, svc: string, extra: Record<string, unknown> = {}): Promise<void> {
  await sms.createServedModel(name, {
    modelName: name,
    fileName: `models/${name}.mar`,
    modelServer: { service: { name: svc, port: 'management' } },
    workers: { min: 1 },
    rollout: { seedFirst: false, maxConcurrent: 20 },
    ...extra,
  });
}

const get = (name: string) => sms.getServedModel(name);
const isReady = (o: ServedModel) =>
  o.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

async function untilReady(name: string, timeoutMs: number): Promise<ServedModel> {
  return waitFor(`${name} Ready`, async () => ((o) => (isReady(o) ? o : undefined))(await get(name)), {
    timeoutMs,
    intervalMs: 50,
  });
}

async function registeredEvents(name: string): Promise<string[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items
    .filter((e) => e.regarding?.name === name && e.reason === 'ModelRegistered')
    .map((e) => e.note ?? '');
}

describe('ServedModel rollouts in the background', () => {
  it('a slow registration does not delay the reconcile of another ServedModel (one worker)', async () => {
    await operator();
    const slow = await fleet(2, { registrationLatencyMs: 8_000 });
    const fast = await fleet(2, { registrationLatencyMs: 10 });
    await service('slow', slow.urls);
    await service('fast', fast.urls);
    await create('big', 'slow');
    const downloading = await waitFor(
      'big Downloading',
      async () => {
        const o = await get('big');
        return o.status?.replicas?.every((r) => r.phase === 'Downloading') ? o : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    expect(downloading.status?.ready).toBe('0/2');
    expect(downloading.status?.replicas?.[0]?.since).toMatch(/^\d{4}-/);

    const t0 = Date.now();
    await create('small', 'fast');
    await untilReady('small', 5_000);
    const took = Date.now() - t0;
    // The big one is still downloading: the small one did not wait for it.
    expect(isReady(await get('big'))).toBe(false);
    expect(took).toBeLessThan(3_000);
    expect(slow.stats().pluginRegistrationsStarted).toBe(2);
    const big = await untilReady('big', 20_000);
    expect(big.status?.replicas?.map((r) => r.phase)).toEqual(['Ready', 'Ready']);
  }, 40_000);

  it('status shows progress mid-rollout, and every replica registration has its Event', async () => {
    const f = await fleet(20, { registrationLatencyMs: 1_500 });
    await service('prog', f.urls);
    await create('progress', 'prog', { rollout: { seedFirst: false, maxConcurrent: 4 } });
    const seen = new Set<string>();
    const phases = new Set<string>();
    const done = await waitFor(
      'progress Ready',
      async () => {
        const o = await get('progress');
        if (o.status?.ready) seen.add(o.status.ready);
        for (const r of o.status?.replicas ?? []) if (r.phase) phases.add(r.phase);
        return isReady(o) ? o : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    expect(done.status?.ready).toBe('20/20');
    // 4 at a time × 1.5 s: several intermediate counts were written while it ran.
    const partial = [...seen].filter((s) => s !== '0/20' && s !== '20/20');
    expect(partial.length).toBeGreaterThanOrEqual(2);
    expect(phases).toContain('Pending');
    expect(phases).toContain('Downloading');
    const notes = await waitFor(
      '20 ModelRegistered Events',
      async () => ((n) => (n.length >= 20 ? n : undefined))(await registeredEvents('progress')),
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    expect(new Set(notes).size).toBe(20);
    expect(f.stats().pluginRegistrationsStarted).toBe(20);
  }, 90_000);

  it('an operator restarted mid-download waits for that download instead of starting another', async () => {
    // The first test's operator stops here: one operator at a time, as with leader election.
    for (const c of cleanups.splice(0)) await c();
    const first = await operator();
    const f = await fleet(1, { registrationLatencyMs: 5_000 });
    await service('restart', f.urls);
    await create('restart', 'restart', { version: '1.0' });
    await waitFor(
      'restart Downloading',
      async () => (await get('restart')).status?.replicas?.[0]?.phase === 'Downloading',
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    await first.stop();
    await operator();
    await waitFor(
      'restart waiting for the earlier download',
      async () => /earlier request/.test((await get('restart')).status?.replicas?.[0]?.message ?? ''),
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    const ready = await untilReady('restart', 20_000);
    expect(ready.status?.ready).toBe('1/1');
    const stats = f.stats();
    expect(stats.pluginRegistrationsStarted).toBe(1);
    expect(stats.inProgressAnswers).toBeGreaterThanOrEqual(1);
    expect(stats.registrations).toBe(1);
  }, 60_000);

  it('a failure that needs a change (version mismatch) is Stalled and not retried at poll rate', async () => {
    const f = await fleet(1, { registrationLatencyMs: 10, modelVersion: '1.0' });
    await service('mismatch', f.urls);
    await create('mismatch', 'mismatch', { version: '2.0' });
    const stalled = await waitFor(
      'mismatch Stalled',
      async () => {
        const o = await get('mismatch');
        return o.status?.conditions?.some((c) => c.type === 'Stalled' && c.status === 'True') ? o : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    expect(stalled.status?.conditions?.find((c) => c.type === 'Ready')?.reason).toBe('VersionMismatch');
    expect(stalled.status?.replicas?.[0]?.phase).toBe('Failed');
    // Looks scheduled before it stalled (at most --poll-backoff-max 1s away) may still come; then none.
    await new Promise((r) => setTimeout(r, 2_000));
    const attempts = f.stats().registrationAttempts;
    expect(attempts).toBeLessThanOrEqual(4);
    // --poll-backoff-start 100ms, --poll-backoff-max 1s: at poll rate this would be 3 to 20 more attempts.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(f.stats().registrationAttempts).toBe(attempts);
    expect((await get('mismatch')).status?.conditions?.find((c) => c.type === 'Ready')?.reason).toBe(
      'VersionMismatch',
    );
  }, 40_000);
});
