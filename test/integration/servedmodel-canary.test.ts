/**
 * A Staged rollout's canary (spec.rollout.canary) against the real kube-apiserver and TorchServe emulators with
 * their inference API: once every replica has v2 staged, only the canary serves it, probed with a real prediction
 * (POST /predictions/{name}/2 on the inference port) for the hold; then the others switch at once. A v2 that
 * answers wrongly is rolled back on every replica before any other replica served it, the status saying what the
 * probe got against what was expected; without a probe, a canary whose v2 stops being ready (its workers gone) is
 * rolled back the same way; an operator restarted during the hold goes on with the same canary.
 *
 * Each replica listens on an address of its own (127.0.90.x), all at one inference port, as pods do: the probe's
 * port is one number in the spec.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import {
  marVersion,
  startModelServerEmulator,
  type ModelServerEmulator,
  type ModelServerEmulatorOptions,
} from '../support/modelserver-emulator.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { restartableServedModelOperator, type RestartableOperator } from '../support/runtime-harness.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import type { RolloutStatus, ServedModel } from '../../src/api/index.ts';

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
const cleanups: (() => Promise<unknown>)[] = [];
const services: ServiceEndpoints[] = [];
/** Slice addresses to the replicas' own loopback addresses. */
const dispatcher = loopbackDispatcher((a) => services.map((s) => s.hostOf(a)).find((h) => h !== undefined));

let operator: RestartableOperator;

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('smcanary'));
  operator = restartableServedModelOperator(kc, dispatcher);
  await operator.start();
});

afterAll(async () => {
  await operator.stop();
  for (const c of cleanups.reverse()) await c();
});

/** Each fleet on addresses of its own: 127.0.90.1-4, 127.0.90.11-14, ... */
let nextHost = 1;

interface Fleet {
  instances: ModelServerEmulator[];
  urls: string[];
  inferencePort: number;
}

/** `n` replicas, each on its own loopback address, with the inference API at one port for all. */
async function fleet(n: number, opts: Partial<ModelServerEmulatorOptions> = {}): Promise<Fleet> {
  const base = nextHost;
  nextHost += 10;
  const instances: ModelServerEmulator[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startModelServerEmulator({
      modelVersion: marVersion,
      workerStartMs: 50,
      registrationLatencyMs: 50,
      host: `127.0.90.${base + i}`,
      inferencePort: instances[0]?.inferencePort ?? 0,
      ...opts,
    });
    instances.push(e);
    cleanups.push(() => e.close());
  }
  return { instances, urls: instances.map((e) => e.url), inferencePort: instances[0]!.inferencePort };
}

async function service(name: string, urls: string[]): Promise<void> {
  const svc = await ServiceEndpoints.of(kc, ns, name, urls);
  services.push(svc);
  cleanups.push(async () => {
    for (const pod of [...svc.pods.keys()]) await svc.remove(pod);
  });
}

const spec = (name: string, version: string, canary: Record<string, unknown>) => ({
  modelName: name,
  version,
  fileName: `models/${name}-v${version}.mar`,
  modelServer: { service: { name, port: 'management' } },
  workers: { min: 1 },
  rollout: { seedFirst: false, maxConcurrent: 10, strategy: 'Staged', canary },
});

const get = (name: string) => sms.getServedModel(name);
const condition = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

async function onV1(name: string, f: Fleet, canary: Record<string, unknown>): Promise<void> {
  await service(name, f.urls);
  await sms.createServedModel(name, spec(name, '1', canary));
  await sms.untilReadyOn(name, `${f.urls.length}/${f.urls.length}`, { timeoutMs: 20_000, intervalMs: 50 });
}

function untilRollout(name: string, done: (r: RolloutStatus) => boolean, what: string, timeoutMs = 30_000) {
  return waitFor(
    `${name} rollout ${what}`,
    async () => {
      const o = await get(name);
      if (o.status?.rollout && done(o.status.rollout)) return o;
      throw new Error(`status.rollout ${JSON.stringify(o.status?.rollout)}`);
    },
    { timeoutMs, intervalMs: 50 },
  );
}
const inPhase = (phase: RolloutStatus['phase']) => (r: RolloutStatus) => r.phase === phase;

async function eventsOf(name: string): Promise<{ type: string; reason: string; note: string }[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items
    .filter((e) => e.regarding?.name === name)
    .map((e) => ({ type: e.type ?? '', reason: e.reason ?? '', note: e.note ?? '' }));
}

/** Every 2 ms: which replicas have served `version` as their default, and when each first did. */
function watchDefaults(f: Fleet, model: string, version: string) {
  const first: (number | undefined)[] = f.instances.map(() => undefined);
  const timer = setInterval(() => {
    const now = Date.now();
    f.instances.forEach((e, i) => {
      if (e.defaultVersion(model) === version) first[i] ??= now;
    });
  }, 2);
  return {
    /** The indexes of the replicas seen serving `version`. */
    served: () => first.flatMap((t, i) => (t === undefined ? [] : [i])),
    first: () => [...first],
    stop: () => clearInterval(timer),
  };
}

const probe = (port: number, expect: Record<string, unknown>) => ({
  port,
  body: JSON.stringify({ data: [1, 2, 3] }),
  expect,
});

describe('the canary of a Staged rollout', () => {
  it('switches one canary, probes it with a real prediction for the hold, then switches the others at once', async () => {
    const f = await fleet(4);
    const canary = {
      replicas: 1,
      holdSeconds: 3,
      probe: probe(f.inferencePort, {
        status: 200,
        fields: [
          { path: 'version', equals: '2' },
          { path: 'input.data.2', equals: '3' },
        ],
      }),
    };
    await onV1('good', f, canary);
    const watch = watchDefaults(f, 'good', '2');
    try {
      await sms.patchServedModel('good', { spec: { version: '2', fileName: 'models/good-v2.mar' } });
      const holding = await untilRollout(
        'good',
        (r) => r.phase === 'Canary' && !!r.canary?.holdUntil,
        'holding',
      );
      const c = holding.status!.rollout!.canary!;
      expect(c.replicas).toHaveLength(1);
      // During the hold only the canary serves v2; the others have it staged, READY, not served.
      const canaryIndex = f.instances.findIndex((e) => e.defaultVersion('good') === '2');
      expect(f.instances.map((e) => e.defaultVersion('good')).filter((v) => v === '2')).toHaveLength(1);
      expect(c.replicas[0]).toContain(`pod good-${canaryIndex} `);
      for (const e of f.instances)
        expect(
          e
            .model('good')
            .map((m) => m.modelVersion)
            .sort(),
        ).toEqual(['1', '2']);

      const done = await untilRollout('good', inPhase('Complete'), 'Complete');
      watch.stop();
      const r = done.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', switched: 4 });
      expect(r.canary).toMatchObject({ replicas: c.replicas, failures: 0, promoted: true });
      // Probed at the start of the hold and as it ended at least.
      expect(r.canary!.passes).toBeGreaterThanOrEqual(2);
      // The others switched no earlier than the hold's end, together.
      const first = watch.first();
      const others = first.filter((_, i) => i !== canaryIndex) as number[];
      expect(others.every((t) => t !== undefined)).toBe(true);
      expect(Math.min(...others)).toBeGreaterThanOrEqual(Date.parse(c.holdUntil!) - 50);
      expect(Math.min(...others) - first[canaryIndex]!).toBeGreaterThanOrEqual(3_000);
      expect(r.switchWindowMs).toBeLessThan(400);
      // The probes went to the canary's v2 only, on its inference port.
      const predictions = f.instances.map((e) => e.stats.predictions);
      expect(predictions[canaryIndex]!['good/2']).toBeGreaterThanOrEqual(r.canary!.passes);
      predictions.forEach((p, i) => i !== canaryIndex && expect(p).toEqual({}));
      for (const e of f.instances) expect(e.model('good').map((m) => m.modelVersion)).toEqual(['2']);
      const reasons = (await eventsOf('good')).map((e) => e.reason);
      for (const reason of ['RolloutCanary', 'RolloutSwitching', 'RolloutComplete'])
        expect(reasons).toContain(reason);
      expect(condition(done, 'Degraded')?.status ?? 'False').toBe('False');
    } finally {
      watch.stop();
    }
  }, 60_000);

  it('a v2 that answers wrongly is rolled back everywhere before any other replica served it', async () => {
    // v2's handler answers "dog" where v1's answers "cat".
    const f = await fleet(3, { predict: (_m, version) => ({ label: version === '2' ? 'dog' : 'cat' }) });
    const canary = {
      // A third of 3, rounded up: one.
      percent: 33,
      holdSeconds: 30,
      probe: probe(f.inferencePort, { fields: [{ path: 'label', equals: 'cat' }] }),
    };
    await onV1('wrong', f, canary);
    const watch = watchDefaults(f, 'wrong', '2');
    try {
      await sms.patchServedModel('wrong', { spec: { version: '2', fileName: 'models/wrong-v2.mar' } });
      const back = await untilRollout('wrong', inPhase('RolledBack'), 'RolledBack');
      watch.stop();
      const r = back.status!.rollout!;
      expect(r).toMatchObject({ reason: 'CanaryFailed', previousVersion: '1', version: '2' });
      expect(r.canary).toMatchObject({ failures: 1, passes: 0 });
      expect(r.canary!.replicas).toHaveLength(1);
      expect(r.message).toContain(
        `canary ${r.canary!.replicas[0]} failed its probe: got label = "dog", expected "cat"`,
      );
      expect(r.message).toContain('peerload.io/retry-rollout');
      // Only the canary ever served v2, and it did not wait for the 30 s hold to be put back.
      expect(watch.served()).toHaveLength(1);
      expect(Date.parse(r.completionTime!) - Date.parse(r.canary!.holdUntil!)).toBeLessThan(0);
      for (const e of f.instances) {
        expect(e.defaultVersion('wrong')).toBe('1');
        expect(e.model('wrong').map((m) => m.modelVersion)).toEqual(['1']);
      }
      expect(condition(back, 'Degraded')).toMatchObject({ status: 'True', reason: 'RolledBack' });
      const warnings = (await eventsOf('wrong')).filter((e) => e.type === 'Warning');
      expect(warnings.map((e) => e.reason)).toContain('RolloutRollingBack');
      expect(warnings.find((e) => e.reason === 'RolloutRolledBack')?.note).toContain('CanaryFailed');
    } finally {
      watch.stop();
    }
  }, 60_000);

  it('without a probe, a canary whose v2 loses its workers during the hold is rolled back: the version-ready check', async () => {
    const f = await fleet(3);
    await onV1('ready', f, { replicas: 1, holdSeconds: 20 });
    await sms.patchServedModel('ready', { spec: { version: '2', fileName: 'models/ready-v2.mar' } });
    const holding = await untilRollout(
      'ready',
      (r) => r.phase === 'Canary' && !!r.canary?.holdUntil,
      'holding',
    );
    const canaryIndex = f.instances.findIndex((e) => e.defaultVersion('ready') === '2');
    // Its v2 workers go (as a crashed worker would leave it): the server says v2 is not ready there.
    const res = await fetch(
      `${f.urls[canaryIndex]}/models/ready/2?min_worker=0&max_worker=0&synchronous=true`,
      {
        method: 'PUT',
      },
    );
    expect(res.status).toBeLessThan(300);
    const back = await untilRollout('ready', inPhase('RolledBack'), 'RolledBack');
    const r = back.status!.rollout!;
    expect(r).toMatchObject({
      reason: 'CanaryFailed',
      canary: { replicas: holding.status!.rollout!.canary!.replicas },
    });
    expect(r.message).toContain('got 2 default with 0/1 workers READY, expected it the default and ready');
    // Rolled back well before the hold's end; nothing else ever served v2, and no prediction was asked for.
    expect(Date.parse(r.completionTime!)).toBeLessThan(Date.parse(r.canary!.holdUntil!));
    for (const e of f.instances) {
      expect(e.defaultVersion('ready')).toBe('1');
      expect(e.model('ready').map((m) => m.modelVersion)).toEqual(['1']);
      expect(e.stats.predictions).toEqual({});
    }
  }, 60_000);

  it('an operator restarted during the hold goes on with the same canary and switches each replica once', async () => {
    const f = await fleet(3);
    const canary = { replicas: 1, holdSeconds: 4, probe: probe(f.inferencePort, { status: 200 }) };
    await onV1('resume', f, canary);
    for (const e of f.instances) e.resetStats();
    await sms.patchServedModel('resume', { spec: { version: '2', fileName: 'models/resume-v2.mar' } });
    const holding = await untilRollout(
      'resume',
      (r) => r.phase === 'Canary' && !!r.canary?.holdUntil,
      'holding',
    );
    await operator.stop();
    const chosen = holding.status!.rollout!.canary!.replicas;
    // Stopped: nothing moves. Restarted past the hold's end, it probes once more and promotes.
    await new Promise((r) => setTimeout(r, 4_500));
    expect(f.instances.map((e) => e.defaultVersion('resume')).filter((v) => v === '2')).toHaveLength(1);
    await operator.start();
    const done = await untilRollout('resume', inPhase('Complete'), 'Complete');
    expect(done.status!.rollout!.canary).toMatchObject({ replicas: chosen, promoted: true, failures: 0 });
    const setDefaults = f.instances.reduce((n, e) => n + e.stats.setDefaults, 0);
    expect(setDefaults).toBe(3);
    for (const e of f.instances) expect(e.defaultVersion('resume')).toBe('2');
  }, 60_000);
});
