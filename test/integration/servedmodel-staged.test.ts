/**
 * Staged rollouts (spec.rollout.strategy: Staged) against the real kube-apiserver and TorchServe emulators: the new
 * version is registered and READY on every replica before any replica serves it, then every replica switches in one
 * short window and the old version goes; a version that fails to load on one replica, or makes no progress within
 * the deadline, puts every replica back on the previous version; paused holds; the retry annotation tries again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import {
  marVersion,
  startModelServerFleet,
  type ModelServerEmulator,
  type ModelServerFleet,
} from '../support/modelserver-emulator.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { restartableServedModelOperator, type RestartableOperator } from '../support/runtime-harness.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { RETRY_ROLLOUT_ANNOTATION, type RolloutStatus, type ServedModel } from '../../src/api/index.ts';

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
const cleanups: (() => Promise<unknown>)[] = [];
const dispatcher = loopbackDispatcher();

/** The operator under test: one at a time (as with leader election). */
let operator: RestartableOperator;

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('smstaged'));
  operator = restartableServedModelOperator(kc, dispatcher);
  await operator.start();
});

afterAll(async () => {
  await operator.stop();
  for (const c of cleanups.reverse()) await c();
});

async function fleet(
  n: number,
  opts: Parameters<typeof startModelServerFleet>[1] = {},
): Promise<ModelServerFleet> {
  const f = await startModelServerFleet(n, (i) => ({
    modelVersion: marVersion,
    workerStartMs: 50,
    ...(typeof opts === 'function' ? opts(i) : opts),
  }));
  cleanups.push(() => f.close());
  return f;
}

/** The replicas of a Service, gone from its EndpointSlices at clean-up (before the fleet's ports are free). */
async function service(name: string, urls: string[]): Promise<void> {
  const svc = await ServiceEndpoints.of(kc, ns, name, urls);
  cleanups.push(async () => {
    for (const pod of [...svc.pods.keys()]) await svc.remove(pod);
  });
}

const spec = (name: string, version: string, rollout: Record<string, unknown> = {}) => ({
  modelName: name,
  version,
  fileName: `models/${name}-v${version}.mar`,
  modelServer: { service: { name, port: 'management' } },
  workers: { min: 1 },
  rollout: { seedFirst: false, maxConcurrent: 10, strategy: 'Staged', ...rollout },
});

const get = (name: string) => sms.getServedModel(name);
const condition = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

/** Version 1 Ready on every replica of a fresh fleet, staged from the start. */
async function onV1(name: string, f: ModelServerFleet, rollout: Record<string, unknown> = {}): Promise<void> {
  await service(name, f.urls);
  await sms.createServedModel(name, spec(name, '1', rollout));
  await sms.untilReadyOn(name, `${f.urls.length}/${f.urls.length}`, { timeoutMs: 20_000, intervalMs: 50 });
}

/** The ServedModel once status.rollout is in `phase` for `version`. */
function untilRollout(name: string, phase: RolloutStatus['phase'], timeoutMs = 20_000) {
  return waitFor(
    `${name} rollout ${phase}`,
    async () => {
      const o = await get(name);
      if (o.status?.rollout?.phase === phase) return o;
      // A time-out names where it was.
      throw new Error(
        `status.rollout ${JSON.stringify(o.status?.rollout)}; replicas ${JSON.stringify(o.status?.replicas?.map((r) => r.message ?? r.phase))}`,
      );
    },
    { timeoutMs, intervalMs: 50 },
  );
}

async function eventsOf(name: string): Promise<{ type: string; reason: string; note: string }[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items
    .filter((e) => e.regarding?.name === name)
    .map((e) => ({ type: e.type ?? '', reason: e.reason ?? '', note: e.note ?? '' }));
}

/** Whether `version` is registered on the replica with a READY worker. */
const readyOn = (e: ModelServerEmulator, model: string, version: string) =>
  e.model(model).some((m) => m.modelVersion === version && m.workers.some((w) => w.readyAt <= Date.now()));

/**
 * Watches the fleet every 2 ms: each moment a replica serves `version` as its default while another replica has
 * no READY worker of it (what Staged must never do), and when the first and last replica switched.
 */
function watchDefaults(f: ModelServerFleet, model: string, version: string) {
  const early: string[] = [];
  const firstSwitch: (number | undefined)[] = f.instances.map(() => undefined);
  const timer = setInterval(() => {
    const now = Date.now();
    f.instances.forEach((e, i) => {
      if (e.defaultVersion(model) === version) firstSwitch[i] ??= now;
    });
    const serving = f.instances.filter((e) => e.defaultVersion(model) === version);
    const notReady = f.instances.filter((e) => !readyOn(e, model, version));
    if (serving.length > 0 && notReady.length > 0)
      early.push(
        `${serving.map((e) => e.url).join()} served ${version} while ${notReady.map((e) => e.url).join()} had it not ready`,
      );
  }, 2);
  return {
    early,
    /** ms from the first replica seen serving `version` to the last. */
    window: () => {
      const seen = firstSwitch.filter((t): t is number => t !== undefined);
      return seen.length === f.instances.length ? Math.max(...seen) - Math.min(...seen) : undefined;
    },
    stop: () => clearInterval(timer),
  };
}

describe('a Staged rollout', () => {
  it('registers v2 READY everywhere before any replica serves it, switches all in one window, drops v1', async () => {
    // Registrations take a while, so the staging is seen to overlap: v1 must keep serving all along.
    const f = await fleet(4, { registrationLatencyMs: 400 });
    await onV1('good', f);
    const watch = watchDefaults(f, 'good', '2');
    try {
      await sms.patchServedModel('good', { spec: { version: '2', fileName: 'models/good-v2.mar' } });
      const staging = await untilRollout('good', 'Staging');
      expect(staging.status?.rollout).toMatchObject({ version: '2', previousVersion: '1', replicas: 4 });
      // Mid-staging: v1 still the default everywhere.
      expect(f.instances.map((e) => e.defaultVersion('good'))).toEqual(['1', '1', '1', '1']);
      const done = await untilRollout('good', 'Complete');
      await sms.untilReadyOn('good', '4/4', { timeoutMs: 10_000, intervalMs: 50 });
      watch.stop();
      expect(watch.early).toEqual([]);
      const r = done.status!.rollout!;
      expect(r).toMatchObject({
        phase: 'Complete',
        version: '2',
        previousVersion: '1',
        staged: 4,
        switched: 4,
      });
      expect(r.switchWindowMs).toBeGreaterThanOrEqual(0);
      // One pass's concurrent set-defaults: far shorter than the 400 ms of one registration.
      expect(r.switchWindowMs).toBeLessThan(400);
      expect(watch.window()).toBeLessThan(400);
      expect(Date.parse(r.switchEndTime!) - Date.parse(r.switchStartTime!)).toBe(r.switchWindowMs);
      for (const e of f.instances) {
        expect(e.model('good').map((m) => m.modelVersion)).toEqual(['2']);
        expect(e.defaultVersion('good')).toBe('2');
      }
      // Each replica's default was set once: no switch back and forth.
      expect(f.stats().setDefaults).toBe(4);
      const events = await eventsOf('good');
      const reasons = events.map((e) => e.reason);
      for (const reason of ['RolloutStaging', 'RolloutSwitching', 'RolloutRetiring', 'RolloutComplete'])
        expect(reasons).toContain(reason);
      // No rollback, nothing failing. (Ready is False while v2 is not served, as with Rolling: its NotReady.)
      expect(events.filter((e) => e.type === 'Warning' && e.reason !== 'NotReady')).toEqual([]);
      // kubectl get shows where the rollout is.
      const table = (await sms.table('servedmodels', 'good')) as {
        columnDefinitions: { name: string }[];
        rows: { cells: unknown[] }[];
      };
      const col = table.columnDefinitions.findIndex((c) => c.name === 'Rollout');
      expect(table.rows[0]!.cells[col]).toBe('Complete');
      const ms = table.columnDefinitions.findIndex((c) => c.name === 'Switch-ms');
      expect(table.rows[0]!.cells[ms]).toBe(r.switchWindowMs);
    } finally {
      watch.stop();
    }
  }, 60_000);

  it('a v2 that one replica cannot load: every replica back on v1, v2 unregistered, Degraded RolledBack', async () => {
    // The third replica rejects the v2 archive (TorchServe's 400 InvalidModelException, as for a broken handler).
    const f = await fleet(3, (i) => ({
      registrationLatencyMs: i === 2 ? 600 : 50,
      rejectArchive: (file) => (i === 2 && file.endsWith('-v2.mar') ? 'handler failed to load' : undefined),
    }));
    await onV1('bad', f);
    const watch = watchDefaults(f, 'bad', '2');
    try {
      await sms.patchServedModel('bad', { spec: { version: '2', fileName: 'models/bad-v2.mar' } });
      const back = await untilRollout('bad', 'RolledBack');
      watch.stop();
      expect(watch.early).toEqual([]);
      const r = back.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', reason: 'LoadFailed' });
      expect(r.message).toMatch(/could not load 2: .*InvalidModelException/);
      expect(r.message).toMatch(/peerload\.io\/retry-rollout/);
      for (const e of f.instances) {
        expect(e.defaultVersion('bad')).toBe('1');
        expect(e.model('bad').map((m) => m.modelVersion)).toEqual(['1']);
      }
      // The replicas that had staged v2 unregistered it.
      expect(f.stats().unregistrations).toBe(2);
      expect(condition(back, 'Degraded')).toMatchObject({ status: 'True', reason: 'RolledBack' });
      expect(condition(back, 'Ready')).toMatchObject({ status: 'False', reason: 'RolledBack' });
      expect(condition(back, 'Stalled')).toMatchObject({ status: 'True', reason: 'RolledBack' });
      // The spec is left as it is (GitOps shows the drift).
      expect(back.spec.version).toBe('2');
      const warnings = (await eventsOf('bad')).filter((e) => e.type === 'Warning').map((e) => e.reason);
      expect(warnings).toContain('RolloutRollingBack');
      expect(warnings).toContain('RolloutRolledBack');
      // Rolled back stays so: nothing registers v2 again, and the held replicas are not polled (a look scheduled
      // before, at most --poll-backoff-max 500ms away, may still come).
      await new Promise((r) => setTimeout(r, 1_000));
      const requests = f.stats().totalRequests;
      await new Promise((r) => setTimeout(r, 2_000));
      expect(f.stats().totalRequests).toBe(requests);
      expect((await get('bad')).status?.rollout?.phase).toBe('RolledBack');
    } finally {
      watch.stop();
    }
  }, 60_000);

  it('no progress within progressDeadlineSeconds rolls back; the retry annotation tries again', async () => {
    // The second replica's v2 workers never get READY within the deadline.
    const f = await fleet(2, (i) => ({
      registrationLatencyMs: 50,
      workerStartMs: i === 1 ? 600_000 : 50,
    }));
    // The slow replica's v1 workers are as slow: v1 is only registered (its default) there, which is all a rollout
    // needs to roll back to.
    await service('slow', f.urls);
    await sms.createServedModel('slow', spec('slow', '1', { progressDeadlineSeconds: 10 }));
    await waitFor(
      'slow v1 registered on both replicas',
      async () => f.instances.every((e) => e.defaultVersion('slow') === '1'),
      { timeoutMs: 20_000, intervalMs: 50 },
    );
    const t0 = Date.now();
    await sms.patchServedModel('slow', { spec: { version: '2', fileName: 'models/slow-v2.mar' } });
    const back = await untilRollout('slow', 'RolledBack', 30_000);
    const took = Date.now() - t0;
    const r = back.status!.rollout!;
    expect(r).toMatchObject({ reason: 'ProgressDeadlineExceeded', previousVersion: '1' });
    expect(r.message).toMatch(/for 10s \(spec\.rollout\.progressDeadlineSeconds\); 1\/2 staged/);
    // Rolled back once the 10 s passed without progress, not long after.
    expect(took).toBeGreaterThanOrEqual(10_000);
    expect(took).toBeLessThan(20_000);
    for (const e of f.instances) {
      expect(e.defaultVersion('slow')).toBe('1');
      expect(e.model('slow').map((m) => m.modelVersion)).toEqual(['1']);
    }

    // The retry annotation: a new try stages v2 again (the slow replica now starts workers at once).
    const registered = f.stats().registrations;
    await sms.patchServedModel('slow', {
      metadata: { annotations: { [RETRY_ROLLOUT_ANNOTATION]: 'try-2' } },
    });
    const staging = await untilRollout('slow', 'Staging');
    expect(staging.status?.rollout?.attempt).toMatch(/\/try-2$/);
    await waitFor('v2 registered again', async () => f.stats().registrations >= registered + 2, {
      timeoutMs: 10_000,
      intervalMs: 50,
    });
  }, 60_000);

  it('paused holds the rollout where it is; unpaused it completes', async () => {
    const f = await fleet(2, { registrationLatencyMs: 50 });
    await onV1('held', f, { paused: true });
    await sms.patchServedModel('held', { spec: { version: '2', fileName: 'models/held-v2.mar' } });
    const paused = await untilRollout('held', 'Paused');
    expect(paused.status?.rollout).toMatchObject({ version: '2', staged: 0 });
    await new Promise((r) => setTimeout(r, 1_500));
    // Nothing staged, nothing switched.
    for (const e of f.instances) expect(e.model('held').map((m) => m.modelVersion)).toEqual(['1']);
    expect((await get('held')).status?.rollout?.phase).toBe('Paused');
    await sms.patchServedModel('held', { spec: { rollout: { paused: false } } });
    await untilRollout('held', 'Complete');
    for (const e of f.instances) expect(e.defaultVersion('held')).toBe('2');
  }, 60_000);

  it('an operator killed mid-switch, before writing anything of it, finishes the switch from what the replicas say', async () => {
    const f = await fleet(3, { registrationLatencyMs: 10 });
    await onV1('resume', f);
    // As kill -9: from here the operator writes nothing more.
    await operator.stop();
    await sms.patchServedModel('resume', { spec: { version: '2', fileName: 'models/resume-v2.mar' } });
    // What it left mid-switch: v2 staged (READY) on every replica, and the default on the first one only.
    const call = async (url: string, method: string) => {
      const res = await fetch(url, { method });
      expect(res.status, `${method} ${url}`).toBeLessThan(300);
    };
    for (const e of f.instances) {
      await call(`${e.url}/p2p/models?file_name=models/resume-v2.mar&model_name=resume`, 'POST');
      await call(`${e.url}/models/resume/2?min_worker=1&max_worker=1&synchronous=true`, 'PUT');
    }
    await call(`${f.instances[0]!.url}/models/resume/2/set-default`, 'PUT');
    expect(f.instances.map((e) => e.defaultVersion('resume'))).toEqual(['2', '1', '1']);
    for (const e of f.instances) e.resetStats();
    const watch = watchDefaults(f, 'resume', '2');
    try {
      await operator.start();
      const done = await untilRollout('resume', 'Complete');
      watch.stop();
      expect(watch.early).toEqual([]);
      expect(done.status?.rollout).toMatchObject({ version: '2', previousVersion: '1', switched: 3 });
      expect(done.status?.rollout?.switchWindowMs).toBeGreaterThanOrEqual(0);
      const stats = f.stats();
      // Only the two replicas not yet switched were; nothing was registered again; v1 went everywhere.
      expect(stats.setDefaults).toBe(2);
      expect(stats.registrationAttempts).toBe(0);
      expect(stats.unregistrations).toBe(3);
      for (const e of f.instances) expect(e.model('resume').map((m) => m.modelVersion)).toEqual(['2']);
      const rolledBack = (await eventsOf('resume')).filter((e) => e.reason.startsWith('RolloutRoll'));
      expect(rolledBack).toEqual([]);
    } finally {
      watch.stop();
    }
  }, 60_000);
});
