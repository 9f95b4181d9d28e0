/**
 * What the ServedModel reconciler decides, case by case: the seed replica, writing now or coalescing, the next
 * look, keeping an ended registration and the Events of a status write (policy.ts); each replica's status from its outcome and the object,
 * localHit included (replica-status.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Condition } from '../../src/api/index.ts';
import {
  STALLED_RECHECK_MS,
  STATIC_RECHECK_MS,
  STATUS_COALESCE_MS,
  coalescedLook,
  integrityBackoff,
  keepRegistration,
  needsSeed,
  nextLook,
  statusEvents,
  withWake,
  writeNow,
  type LookInput,
} from '../../src/controllers/servedmodel/policy.ts';
import type { ReplicaOutcome } from '../../src/controllers/servedmodel/replica.ts';
import {
  localHitOf,
  replicaStatus,
  stamp,
  summarize,
  type ReplicaStatus,
} from '../../src/controllers/servedmodel/replica-status.ts';

const E = 'http://198.18.0.1:8080';
const NOW = Date.parse('2026-11-26T12:00:00Z');
const at = (ms: number) => new Date(NOW + ms).toISOString();
const rs = (over: Partial<ReplicaStatus> = {}): ReplicaStatus => ({
  endpoint: E,
  registered: true,
  readyWorkers: 1,
  ready: true,
  phase: 'Ready',
  ...over,
});
const outcome = (over: Partial<ReplicaOutcome> = {}): ReplicaOutcome => ({
  status: rs(),
  events: [],
  ...over,
});
const done = (localHit?: boolean) => ({
  state: 'done' as const,
  since: NOW,
  result: { version: '1', localHit },
});
const cond = (type: string, status: string, reason: string): Condition =>
  ({ type, status, reason, message: 'm', lastTransitionTime: at(0) }) as Condition;

describe('needsSeed', () => {
  const spec = (seedFirst: boolean) => ({ rollout: { seedFirst, maxConcurrent: 10 } });
  const none = { state: 'none' } as const;
  it('only when asked, with nothing in the network yet', () => {
    expect(needsSeed(spec(true), none, false, new Map())).toBe(true);
    expect(needsSeed(spec(false), none, false, new Map())).toBe(false);
    expect(needsSeed(spec(true), { state: 'open', preheatName: 'p', message: '' }, false, new Map())).toBe(
      false,
    );
    expect(needsSeed(spec(true), none, true, new Map())).toBe(false);
    expect(needsSeed(spec(true), none, false, new Map([[E, rs()]]))).toBe(false);
    expect(needsSeed(spec(true), none, false, new Map([[E, rs({ registered: false })]]))).toBe(true);
  });
});

describe('writeNow', () => {
  const base = {
    generation: 2,
    observedGeneration: 2,
    conditionsBefore: [cond('Ready', 'False', 'Progressing')],
    conditionsAfter: [cond('Ready', 'False', 'Progressing')],
    newLocalHits: 0,
    sinceWriteMs: 100,
  };
  it('coalesces progress alone within the interval', () => {
    expect(writeNow(base)).toBe(false);
    expect(writeNow({ ...base, sinceWriteMs: STATUS_COALESCE_MS })).toBe(true);
  });
  it('writes at once a new generation, a condition that says something else, or a local hit', () => {
    expect(writeNow({ ...base, observedGeneration: 1 })).toBe(true);
    expect(writeNow({ ...base, conditionsAfter: [cond('Ready', 'True', 'AllReplicasReady')] })).toBe(true);
    expect(writeNow({ ...base, conditionsAfter: [cond('Ready', 'False', 'ReplicaFailures')] })).toBe(true);
    expect(writeNow({ ...base, newLocalHits: 1 })).toBe(true);
  });
  it('a message or time alone is progress', () => {
    const after = [{ ...cond('Ready', 'False', 'Progressing'), message: 'other', lastTransitionTime: at(5) }];
    expect(writeNow({ ...base, conditionsAfter: after })).toBe(false);
  });
});

describe('nextLook', () => {
  const look = (over: Partial<LookInput>) =>
    nextLook({
      replicas: [rs()],
      allReady: true,
      failed: [],
      staticEndpoints: false,
      gate: { state: 'none' },
      readySince: undefined,
      pollBackoffStart: 1_000,
      pollBackoffMax: 30_000,
      now: NOW,
      random: 0.5,
      ...over,
    });
  const failing = (retryable: boolean, kind?: 'auth' | 'terminal') =>
    outcome({ failure: { reason: 'RegistrationRejected', retryable, kind } });

  it('a Staged rollout rolled back or paused: the slow re-check, not the poll of its held replicas', () => {
    const held = [rs({ ready: false, phase: 'Pending', message: 'rolled back to 1 (status.rollout)' })];
    expect(look({ replicas: held, allReady: false })).toEqual({ requeueAfter: 30_000 });
    expect(look({ replicas: held, allReady: false, rolloutHeld: true })).toEqual({
      requeueAfter: STALLED_RECHECK_MS,
    });
  });

  it('ready: nothing with a Service (its slices wake it); a slow jittered re-check with static endpoints', () => {
    expect(look({})).toBeUndefined();
    expect(look({ staticEndpoints: true })).toEqual({ requeueAfter: STATIC_RECHECK_MS });
    expect(look({ staticEndpoints: true, random: 0 })).toEqual({ requeueAfter: STATIC_RECHECK_MS * 0.8 });
  });
  it('a preheat that failed for good: nothing', () => {
    const gate = {
      state: 'closed',
      preheatName: 'p',
      reason: 'PreheatFailed',
      message: '',
      final: true,
    } as const;
    expect(look({ allReady: false, gate })).toBeUndefined();
  });
  it('every failure needs a change: the slow re-check; refused credentials stay on the poll', () => {
    expect(look({ allReady: false, failed: [failing(false, 'terminal')] })).toEqual({
      requeueAfter: STALLED_RECHECK_MS,
    });
    const auth = look({
      allReady: false,
      failed: [failing(false, 'auth')],
      replicas: [rs({ ready: false })],
    });
    expect(auth!.requeueAfter).toBeLessThan(STALLED_RECHECK_MS);
  });
  it('registrations under way: their ends wake it; the longest poll only', () => {
    expect(look({ allReady: false, replicas: [rs({ ready: false, phase: 'Downloading' })] })).toEqual({
      requeueAfter: 30_000,
    });
  });
  it('workers starting: polled soon after the phase began, less often the longer it takes', () => {
    const starting = (ago: number) =>
      look({ allReady: false, replicas: [rs({ ready: false, phase: 'Scaling', since: at(-ago) })] });
    expect(starting(0)).toEqual({ requeueAfter: 1_000 });
    expect(starting(40_000)).toEqual({ requeueAfter: 10_000 });
    expect(starting(400_000)).toEqual({ requeueAfter: 30_000 });
  });
  it('coalesced: the write waits for the interval, the poll and wake-ups do not', () => {
    expect(coalescedLook({ requeueAfter: 5_000 }, 500, Infinity)).toEqual({ requeueAfter: 1_500 });
    expect(coalescedLook({ requeueAfter: 700 }, 500, Infinity)).toEqual({ requeueAfter: 700 });
    expect(coalescedLook(undefined, 500, 300)).toEqual({ requeueAfter: 300 });
    expect(withWake(undefined, Infinity)).toBeUndefined();
    expect(withWake({ requeueAfter: 9_000 }, 2_000)).toEqual({ requeueAfter: 2_000 });
  });
});

describe('keepRegistration', () => {
  it('keeps an outcome that needs a change until the slow re-check, settles the others', () => {
    const mismatch = outcome({ failure: { reason: 'VersionMismatch', retryable: false } });
    expect(keepRegistration(mismatch, done(), NOW + 1_000, 2_000)).toBe(true);
    expect(keepRegistration(mismatch, done(), NOW + STALLED_RECHECK_MS, 2_000)).toBe(false);
    expect(keepRegistration(outcome(), done(), NOW, 2_000)).toBe(false);
    const unavailable = outcome({ failure: { reason: 'ModelServerUnavailable', retryable: true } });
    expect(keepRegistration(unavailable, done(), NOW, 2_000)).toBe(false);
  });

  it('keeps a checksum mismatch for a back-off that doubles with the failures in a row, up to the slow re-check', () => {
    const bad = outcome({ failure: { reason: 'ChecksumMismatch', retryable: true } });
    const failed = (failures: number) => ({ state: 'failed' as const, since: NOW, error: 'x', failures });
    expect(keepRegistration(bad, failed(1), NOW + 1_999, 2_000)).toBe(true);
    expect(keepRegistration(bad, failed(1), NOW + 2_000, 2_000)).toBe(false);
    expect(keepRegistration(bad, failed(3), NOW + 7_999, 2_000)).toBe(true);
    expect(keepRegistration(bad, failed(3), NOW + 8_000, 2_000)).toBe(false);
    expect(integrityBackoff(40, 2_000)).toBe(STALLED_RECHECK_MS);
    expect(integrityBackoff(1, 200)).toBe(200);
  });
});

describe('replica status', () => {
  it('localHit: from the registration that ended, else as status says, and none without the model', () => {
    expect(localHitOf(outcome({ ended: done(true) }), rs({ localHit: false }))).toBe(true);
    expect(localHitOf(outcome({ ended: done(false) }), rs({ localHit: true }))).toBe(false);
    // The plugin could not tell: the earlier answer is not this registration's.
    expect(localHitOf(outcome({ ended: done(undefined) }), rs({ localHit: true }))).toBeUndefined();
    expect(localHitOf(outcome(), rs({ localHit: true }))).toBe(true);
    expect(
      localHitOf(outcome({ status: rs({ registered: false }) }), rs({ localHit: true })),
    ).toBeUndefined();
    const failed = { state: 'failed' as const, since: NOW, error: new Error('409') };
    expect(localHitOf(outcome({ ended: failed }), rs({ localHit: false }))).toBe(false);
    // A model no registration placed (vLLM's base model): what the server says of its fetch, over what status said.
    const said = outcome({ status: rs({ localHit: true }) });
    expect(localHitOf(said, rs({ localHit: false }))).toBe(true);
    expect(localHitOf({ ...said, ended: done(false) }, rs())).toBe(false);
  });

  it('stamp keeps lastUpdateTime while ready and message stay, and since while the phase stays', () => {
    const prev = rs({
      ready: false,
      phase: 'Scaling',
      message: '0/1',
      since: at(-9),
      lastUpdateTime: at(-5),
    });
    const same = stamp(rs({ ready: false, phase: 'Scaling', message: '0/1' }), prev, new Date(NOW));
    expect(same).toMatchObject({ since: at(-9), lastUpdateTime: at(-5) });
    const moved = stamp(rs({ ready: true, phase: 'Ready' }), prev, new Date(NOW));
    expect(moved).toMatchObject({ since: at(0), lastUpdateTime: at(0) });
  });

  it('replicaStatus adds the node, its IP and the local hit', () => {
    const s = replicaStatus(outcome({ ended: done(true) }), 'n1', '10.0.0.1', undefined, new Date(NOW));
    expect(s).toMatchObject({ node: 'n1', nodeIP: '10.0.0.1', localHit: true, since: at(0) });
  });

  it('summarize counts ready replicas and lists failures in the conditions', () => {
    const failed = outcome({
      status: rs({
        endpoint: 'http://198.18.0.2:8080',
        pod: 'ts-2',
        ready: false,
        phase: 'Failed',
        message: 'no',
      }),
      failure: { reason: 'RegistrationRejected', retryable: false, kind: 'terminal' },
    });
    const summary = summarize({
      modelName: 'resnet',
      serviceName: undefined,
      serviceFound: false,
      discovery: { replicas: [{ endpoint: E }, { endpoint: 'http://198.18.0.2:8080' }], startingNodes: [] },
      outcomes: [outcome(), failed],
      previous: new Map(),
      nodeIPs: new Map(),
      gate: { state: 'none' },
      wasReady: false,
      now: new Date(NOW),
    });
    expect(summary).toMatchObject({ ready: 1, desired: 2, allReady: false });
    expect(summary.failed).toEqual([failed]);
    expect(summary.conditions.find((c) => c.type === 'Stalled')).toMatchObject({
      status: 'True',
      reason: 'RegistrationRejected',
    });
  });

  it('summarize: a replica READY in the last status and not now has lost the model (no scale-out)', () => {
    const other = 'http://198.18.0.2:8080';
    const input = (previousReady: boolean) => ({
      modelName: 'resnet',
      serviceName: undefined,
      serviceFound: false,
      discovery: { replicas: [{ endpoint: E }, { endpoint: other }], startingNodes: [] },
      outcomes: [outcome(), outcome({ status: rs({ endpoint: other, ready: false, phase: 'Scaling' }) })],
      previous: new Map([[other, rs({ endpoint: other, ready: previousReady })]]),
      nodeIPs: new Map(),
      gate: { state: 'none' } as const,
      wasReady: true,
      now: new Date(NOW),
    });
    const ready = (i: ReturnType<typeof input>) => summarize(i).conditions.find((c) => c.type === 'Ready');
    expect(ready(input(false))).toMatchObject({ status: 'True', reason: 'ScalingOut' });
    expect(ready(input(true))).toMatchObject({ status: 'False', reason: 'Progressing' });
  });
});

describe('statusEvents', () => {
  const events = (before: Condition[], after: Condition[]) =>
    statusEvents(before, after).map((e) => `${e.type}/${e.reason}`);
  const ready = cond('Ready', 'True', 'AllReplicasReady');
  const scaling = [cond('Ready', 'True', 'ScalingOut'), cond('Reconciling', 'True', 'ScalingOut')];
  const progressing = [cond('Ready', 'False', 'Progressing'), cond('Reconciling', 'True', 'Progressing')];

  it('Ready turning True: Normal Ready; turning False: Warning NotReady; staying: nothing', () => {
    expect(events(progressing, [ready])).toEqual(['Normal/Ready']);
    expect(events([], [ready])).toEqual(['Normal/Ready']);
    expect(events([ready], progressing)).toEqual(['Warning/NotReady']);
    expect(events([ready], [ready])).toEqual([]);
    expect(events(progressing, progressing)).toEqual([]);
  });

  it('a scale-out: Normal ScalingOut when it starts, Normal ScaledOut when it ends, never a Warning', () => {
    expect(events([ready], scaling)).toEqual(['Normal/ScalingOut']);
    expect(events(scaling, scaling)).toEqual([]);
    expect(events(scaling, [ready])).toEqual(['Normal/ScaledOut']);
    // A replica lost meanwhile: the Warning.
    expect(events(scaling, progressing)).toEqual(['Warning/NotReady']);
  });
});
